package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/agent/eligibility"
	"github.com/mooringlb/mooring/internal/announce"
)

// gossip is the membership's metadata side, nil when it has none (test
// fakes: every live member stays eligible).
func (a *Agent) gossip() eligibility.Gossip {
	g, _ := a.deps.Members.(eligibility.Gossip)
	return g
}

// capabilities returns every member's capability, or nil (no filter) when
// gossip or links cannot say, in named steps (internal/agent/eligibility
// computes; this publishes, schedules and records). It is called on every
// decision but recomputes only when gossip (membership or metadata), the
// links, the Nodes or the policies changed.
func (a *Agent) capabilities(ctx context.Context, d changed) (announce.Capabilities, error) {
	g := a.gossip()
	insp, ok := a.deps.Links.(eligibility.Inspector)
	if g == nil || !ok {
		return nil, nil
	}
	if df, ok := a.deps.Members.(interface{ Deferring() bool }); ok {
		a.elig.NoteDeferring(df.Deferring(), a.deps.Members.Members())
	}
	gen := g.Generation()
	if caps, ok := a.elig.Current(gen, d.all || d.nodes || d.policies || d.links); ok {
		return caps, nil
	}
	nodes, pols, err := a.readEligibilityInputs(ctx)
	if err != nil {
		return nil, err
	}
	out := a.elig.Compute(insp, eligibility.Input{Now: a.deps.Clock.Now(), Wall: time.Now(), Gen: gen, Members: g.Snapshot(),
		Relink: d.all || d.nodes || d.links, Nodes: nodes, Policies: convert.Policies(pols), Leaving: a.loop.leaving})
	a.ready.Holding.Store(out.Holding)
	a.loop.lettingGo = out.LettingGo
	a.loop.meta = &out.Meta // published after the responder update (decide)
	for _, w := range out.Wake {
		a.triggerAfter(ctx, w)
	}
	return out.Caps, nil
}

// readEligibilityInputs reads the Nodes and policies from the cache.
func (a *Agent) readEligibilityInputs(ctx context.Context) ([]corev1.Node, []mooringv1.L2AnnouncementPolicy, error) {
	var nodes corev1.NodeList
	if err := a.deps.Reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing Nodes from the cache: %w", err)
	}
	var pols mooringv1.L2AnnouncementPolicyList
	if err := a.deps.Reader.List(ctx, &pols, client.UnsafeDisableDeepCopy); err != nil {
		return nil, nil, fmt.Errorf("listing L2AnnouncementPolicies from the cache: %w", err)
	}
	return nodes.Items, pols.Items, nil
}

// triggerAfter re-decides after d (bounded by ctx: Run's).
func (a *Agent) triggerAfter(ctx context.Context, d time.Duration) {
	timer := a.deps.Clock.After(d)
	go func() {
		select {
		case <-ctx.Done():
		case <-timer:
			a.Trigger()
		}
	}()
}

// stalled reports whether the responder must stay silent: a stall the
// decision loop has not acted on yet, or a returning agent's hold-down
// (whose table is empty anyway). It beats, so the first reply the
// responder would send after a stall (an answer to a request queued
// during it) already sees the stall.
func (a *Agent) stalled() bool {
	return a.stall.Pending() || a.ready.Holding.Load()
}

// resumed is called by the decision loop before each decision: after a
// stall it drops the stale decision by becoming a returning agent (no
// candidate for --hold-down, internal/agent/handoff) and reports that it
// did, so that the caller re-reads what eligibility depends on.
func (a *Agent) resumed(ctx context.Context) bool {
	if !a.stall.Pending() {
		return false
	}
	a.ready.Holding.Store(true) // before the stall is marked handled: the responder stays silent throughout
	gap, _ := a.stall.Handle()
	wait := a.elig.Returning.Resume(a.deps.Clock.Now())
	if !a.elig.Returning.Started() {
		return false // before the first decision: the hold-down decides
	}
	a.stall.Counted()
	a.log.Warn("this agent did not run for longer than its peers wait for it: its decision is stale, so it stops answering and holds back before taking addresses",
		"stalled", gap.Round(time.Millisecond), "threshold", a.stall.Threshold(), "hold down", a.cfg.HoldDown)
	a.triggerAfter(ctx, wait)
	return true
}
