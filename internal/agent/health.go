package agent

import (
	"errors"
	"fmt"
	"sync/atomic"
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
}

// readyz is /readyz: the Node exists (Ready) and the agent serves.
func (a *Agent) readyz() error { return errors.Join(a.Ready(), a.Serving()) }

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
	}
	if n := a.ready.peers.Load(); n > 0 && len(a.deps.Members.Members()) < 2 {
		errs = append(errs, fmt.Errorf("gossip reaches none of the %d other nodes (port %d blocked, or a wrong key?)", n, a.cfg.GossipPort))
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
