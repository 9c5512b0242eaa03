// Package store is what the agent keeps of the API objects it reads: the
// compact store of Services and EndpointSlices (fed by client-go
// Reflectors listing in pages, ~0.4 KB per Service with its slice at
// 10,000 Services), the Reader that serves them as client.Reader calls,
// the slim transforms of the informer caches (Nodes, policies,
// L2Announcers) and the EndpointSlice-by-Service index. It calls back on
// every change the decision reads and on nothing else.
//
// It may import client-go, controller-runtime's client and cache, the API
// types, internal/agent/convert and internal/announce; not the agent's
// other rooms (the snapshot reads it, never the other way round: a reader
// that wraps a Reader says which store it serves through CompactStore).
package store
