// Package snapshot is the agent's local snapshot under --state-dir: the
// inputs its decision read (the slimmed Nodes, policies, Services and
// EndpointSlices) and what it answered for, so that an agent restarted
// while the API server is unreachable decides from it instead of
// announcing nothing. It owns the file format (gzipped JSON, versioned,
// written atomically and only when the content changed), the Keeper that
// writes it after published decisions, the Reader that answers the
// decision's reads from a loaded snapshot, the SwitchReader that moves
// from snapshot to live caches, and the REST mapper that lets the
// informer cache start without the API server.
//
// It may import controller-runtime's client, the API types,
// internal/agent/store (to encode the compact store without building
// objects), internal/agent/mailbox and internal/announce.
package snapshot
