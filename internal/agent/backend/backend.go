package backend

import (
	"context"

	"github.com/mooringlb/mooring/internal/announce"
)

// Pass is one pass of the agent's decision loop, as every announcement
// backend gets it: the same converted inputs the L2 decision
// (internal/announce.State) was fed in this pass, and what that decision
// changed. It is built from the informer caches (or the local snapshot)
// and gossip only: handing it over costs no API call.
//
// The slices are the pass's own: a backend may keep them, but must not
// change them, nor the Services they point to (the L2 state holds the
// same *announce.Service values, one struct per Service for all).
type Pass struct {
	// Full: Services holds every Service (the first pass, a relist, the
	// switch from the snapshot to the live caches); a Service a backend
	// knows that is missing from a Full pass is gone (it is also listed in
	// Deleted). Otherwise Services holds only the ones re-read this pass.
	Full bool
	// Services are the Services read this pass, converted by
	// internal/agent/convert: addresses (IngressIPs: type LoadBalancer of
	// Mooring's class; ExternalIPs), labels, externalTrafficPolicy: Local
	// and the nodes with a ready endpoint. A changed Service comes as a new
	// pointer; the one before is never modified.
	Services []*announce.Service
	// Deleted are the Services gone since the last pass.
	Deleted []announce.ServiceKey
	// Nodes are every Node (name and labels) when they were re-read this
	// pass; nil when unchanged.
	Nodes []announce.Node
	// Members are the live gossip members after the partition rule
	// (internal/agent/gossip): a side that defers sees the majority's
	// members without itself. Always set.
	Members []string
	// Capabilities are the candidates' published capabilities
	// (internal/agent/eligibility); nil when gossip carries none (every
	// member a candidate).
	Capabilities announce.Capabilities
	// Serving: this node is a candidate now. It is false while it holds
	// down after a restart, a drain's exclusion or a stall, and while its
	// take waits for its peers' confirmation: a backend announces nothing
	// from this node then.
	Serving bool
	// Changes are the L2 decision's changes in this pass (an address's
	// owner moved, or this node's interfaces for it changed).
	Changes []announce.Change
}

// Backend is an announcement backend beside the L2 responder (a BGP
// speaker, for one). The agent runs it (Run) with its other parts and
// calls Pass after every decision pass, on the decision loop's goroutine,
// right after the L2 responder got its update.
//
// Pass must return at once (hand the work to the backend's own goroutine,
// e.g. through a mailbox.Box) and must not write to the API server: a
// backend's view reaches the cluster, if at all, through the status the
// agent already writes. The loop never waits for a backend, so a slow one
// cannot delay an L2 failover.
type Backend interface {
	// Name names the backend in logs.
	Name() string
	// Run runs the backend until ctx ends.
	Run(ctx context.Context) error
	// Pass hands the backend one pass (see Pass).
	Pass(p *Pass)
}
