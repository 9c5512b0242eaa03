package agent

import (
	"context"
)

// Planned hand-offs. A node that gets the
// node.kubernetes.io/exclude-from-external-load-balancers label (a drain's
// first step) lets its addresses go and publishes that it is no candidate;
// its peers take them when that reaches them by gossip, so no address has
// two responders on the way (capabilities). When the label goes, the node
// comes back as a restarted agent does: no candidate for --hold-down, then
// it publishes its readiness and takes its addresses TakeDelay later, once
// its peers have let them go.

// excludedReturn notes this node's exclusion and, when it ends, starts the
// hold-down (holdDown then publishes readiness and delays the take).
func (a *Agent) excludedReturn(ctx context.Context, excluded bool) {
	e := a.elig
	switch {
	case excluded && !e.excluded:
		e.excluded = true
		a.log.Info("this Node is excluded from external load balancers: letting its addresses go", "label", "node.kubernetes.io/exclude-from-external-load-balancers")
	case !excluded && e.excluded:
		e.excluded = false
		if !e.started {
			return // the first decision: holdDown decides
		}
		e.returning = true
		e.since = 0
		e.readyAt = a.deps.Clock.Now().Add(a.cfg.HoldDown)
		a.log.Info("this Node is no longer excluded: holding back before taking addresses", "for", a.cfg.HoldDown)
		a.triggerAfter(ctx, a.cfg.HoldDown)
	}
}

// afterClosed is a context that ends once ctx has ended and done is
// closed: gossip leaves only after the responder has stopped answering.
func afterClosed(ctx context.Context, done <-chan struct{}) context.Context {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		<-done
		cancel()
	}()
	return out
}
