package agent

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Where the decision's API state comes from (readiness.source).
const (
	sourceLive     int32 = iota // the informer caches
	sourceSnapshot              // the local snapshot: the API server has not answered since start (snapshot.go)
)

// readiness is what /readyz reports; written by the decision loop, read by
// HTTP handlers.
type readiness struct {
	// decided: the first decision is made, so the caches had synced and
	// the start-up gate (gossip settled) was passed.
	decided atomic.Bool
	// peers: nodes gossip should reach (with an InternalIP), not counting
	// this one.
	peers atomic.Int32
	// source is sourceLive or sourceSnapshot; snapshotAt is when the
	// snapshot in use was written.
	source     atomic.Int32
	snapshotAt atomic.Pointer[time.Time]
	// waiting says why the agent does not decide yet beyond the caches
	// (no usable snapshot), nil if nothing more.
	waiting atomic.Pointer[string]
	// holding: a returning agent's hold-down or take delay is not over,
	// so it is no candidate yet (eligibility.go holdDown).
	holding atomic.Bool
}

// readyz is /readyz: the Node exists (Ready) and the agent serves. Once it
// decides, the text says from what: the live API state or the local
// snapshot (also beside an error: a lone survivor serves, not ready).
func (a *Agent) readyz() (string, error) {
	what := ""
	if a.ready.decided.Load() {
		what = a.ServingFrom()
	}
	return what, errors.Join(a.Ready(), a.Serving())
}

// ServingFrom says where the decision's API state comes from.
func (a *Agent) ServingFrom() string {
	if a.ready.source.Load() == sourceSnapshot {
		at := "?"
		if t := a.ready.snapshotAt.Load(); t != nil {
			at = t.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("serving from the local snapshot written %s: the API server has not answered since this agent started", at)
	}
	return "serving from the live API state"
}

// Serving returns nil when the agent serves: caches synced, gossip joined
// (when there is anyone to join), its first decision applied, and every
// interface it must answer on open; else every reason it does not. The
// DaemonSet's readiness probe reads it, so a rolling update moves to the
// next node only once this one serves again (make-before-break across
// nodes).
func (a *Agent) Serving() error {
	var errs []error
	if !a.ready.decided.Load() {
		errs = append(errs, errors.New("not deciding yet: waiting for the informer caches to sync and for gossip to settle"))
		if w := a.ready.waiting.Load(); w != nil {
			errs = append(errs, errors.New(*w))
		}
	}
	if n := a.ready.peers.Load(); n > 0 && len(a.deps.Members.Members()) < 2 {
		errs = append(errs, fmt.Errorf("gossip reaches none of the %d other nodes (port %d blocked, or a wrong key?)", n, a.cfg.GossipPort))
	}
	if a.ready.holding.Load() {
		// Not ready until it has taken its addresses back: a rolling
		// update then stops the next agent only once this one serves, so
		// every address always has a candidate.
		errs = append(errs, fmt.Errorf("holding down after a restart or a drain (--hold-down %s): peers serve this node's addresses until it takes them back", a.cfg.HoldDown))
	}
	if d, ok := a.deps.Members.(interface{ Deferring() bool }); ok && d.Deferring() {
		errs = append(errs, errors.New("deferring: gossip is cut from most nodes while their kernels answer (a partition); this side is not the majority and announces nothing"))
	}
	if h, ok := a.deps.Responder.(interface{ Healthy() error }); ok {
		if err := h.Healthy(); err != nil {
			errs = append(errs, fmt.Errorf("responder: %w", err))
		}
	}
	return errors.Join(errs...)
}
