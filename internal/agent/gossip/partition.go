package gossip

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/membership"
)

// Fail-safe partitions. When gossip is cut between groups of nodes while
// the segment still works (port 7946 blocked), each group sees the other's
// nodes answer ARP but not gossip: the kernel check holds them (they stay
// members) for at most AgentLossTimeout, after which membership reports
// them Unreachable. Were each group then to announce everything it sees as
// its own, every address would have a responder on every side, each
// recording moves against the other.
//
// So a group that cannot prove it is the majority defers: it takes the
// nodes it lost as the members (its own nodes excluded), which is exactly
// the majority's view of the cluster, so it owns nothing, writes nothing
// but its L2Announcer's member list, and computes the same owners as the
// majority. Nodes whose kernel is silent are dead, not lost, and do not
// count: a lone survivor of a real failure keeps serving.
//
// How fast:
//   - A strict minority counting the held nodes defers as soon as they are
//     held (gossip detection plus one kernel check, well under a second):
//     being stalled itself is the only other way to see this, and then it
//     answers nothing anyway. A tie waits until the held nodes are
//     unreachable and goes to the half holding the smallest node name: in
//     a two-node cluster a stalled peer must not make the other defer.
//   - The majority keeps a held node's addresses where they are: the node
//     may only be stalled (SIGSTOP, starvation), and a 2 s stall must move
//     nothing. But a deferring node says so through the API server (its
//     L2Announcer lists the members it defers to, without itself), which a
//     stalled one cannot: while nodes are held, the majority looks at their
//     L2Announcers (watched: no request per look) every releaseEvery and
//     releases at once the ones whose deferral began during this loss
//     (RunReleases, Deferrals: an old list left behind is not a deferral).
//     So with the API server reachable, one node answers each address
//     about a second after the cut.
//   - With the API server unreachable nothing can tell the two apart: the
//     majority waits AgentLossTimeout (4 s), then takes the lost nodes'
//     addresses; the minority has deferred since the cut (or, in a tie,
//     defers at the same moment). Between the two, the lost side's
//     addresses have no responder (clients keep their ARP/NDP entries, and
//     the lost nodes still forward), never two.
//
// The cost, documented: in a two-node cluster whose smaller-named node's
// agent crashes for longer than AgentLossTimeout while its kernel runs, the
// other node defers too (it cannot tell this from a partition); in a
// cluster where more than half of the agents stall at once, the others
// defer for as long as the stall lasts.

// releaseEvery paces the majority's look at held nodes' deferrals.
const releaseEvery = 250 * time.Millisecond

// deferralGrace is how long before this agent began holding a node a
// deferral it saw appear still counts. The two sides of a cut lose each
// other at about the same moment, each on its own failure detector, so the
// minority's write may arrive a little before the majority holds it; a
// deferral older than that was written before the node was last seen well
// and is stale (see deferrals).
const deferralGrace = 2 * time.Second

// quorumMembers is what the core should see as the live members, given the
// live gossip members (self and held ones included), the held ones and the
// unreachable ones. Pure.
func quorum(live, held, unreachable []string) (members []string, majority bool) {
	lost := append(slices.Clone(held), unreachable...)
	slices.Sort(lost)
	lost = slices.Compact(lost)
	sure := slices.DeleteFunc(slices.Clone(live), func(n string) bool { return slices.Contains(held, n) })
	if len(sure) < len(lost) {
		return lost, false
	}
	if len(unreachable) == 0 {
		return live, true
	}
	switch {
	case len(live) > len(unreachable):
		return live, true
	case len(live) == len(unreachable) && slices.Min(live) < slices.Min(unreachable):
		return live, true
	}
	return slices.Clone(unreachable), false
}

// FailSafe is membership as the agent uses it: Members applies the
// partition rule; everything else is membership's own.
type FailSafe struct {
	*membership.Membership
}

func (f FailSafe) quorum() ([]string, bool) {
	return quorum(f.Membership.Members(), f.Membership.Held(), f.Membership.Unreachable())
}

// Members are the live members after the partition rule.
func (f FailSafe) Members() []string {
	m, _ := f.quorum()
	return m
}

// Deferring reports whether this node's side of a gossip partition is not
// the majority, and so announces nothing.
func (f FailSafe) Deferring() bool {
	_, majority := f.quorum()
	return !majority
}

// Releaser is what RunReleases needs of membership (FailSafe has it).
type Releaser interface {
	Held() []string
	Release(name string) bool
	Deferring() bool
}

// RunReleases releases held nodes whose agent says through the API server
// that it defers now (see above and Deferrals) until ctx ends. An
// unreachable API server costs nothing but the fast path:
// AgentLossTimeout decides then.
func (d *Deferrals) RunReleases(ctx context.Context, rel Releaser, clk clock.WithTicker, log *slog.Logger) error {
	tick := clk.NewTicker(releaseEvery)
	defer tick.Stop()
	heldSince := map[string]time.Time{} // when this loop first saw each held node
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
		for _, n := range d.releaseRound(rel, heldSince, clk.Now()) {
			log.Warn("gossip partition: a lost node defers (its L2Announcer says so); taking its addresses", "node", n)
		}
	}
}

// releaseRound notes when each held node was first seen held and releases
// the ones with a current deferral; it returns them.
func (d *Deferrals) releaseRound(rel Releaser, heldSince map[string]time.Time, now time.Time) []string {
	held := rel.Held()
	for n := range heldSince {
		if !slices.Contains(held, n) {
			delete(heldSince, n)
		}
	}
	for _, n := range held {
		if _, ok := heldSince[n]; !ok {
			heldSince[n] = now
		}
	}
	if len(held) == 0 || rel.Deferring() {
		return nil
	}
	var out []string
	for _, n := range held {
		if d.current(n, heldSince[n]) && rel.Release(n) {
			out = append(out, n)
		}
	}
	return out
}

// Deferrals are the L2Announcers that say their agent defers (members
// listed, itself not), each with when this agent saw it start deferring,
// on this agent's clock. A list alone says nothing about when it was
// written: an agent that deferred during a partition, came back and could
// not rewrite its L2Announcer (API server unreachable, a stall right after
// the heal) leaves an old deferral behind, and taking that as current
// would release the node the next time it merely stalls. So a deferral
// counts only if it appeared while this agent was holding the node (or
// deferralGrace before): it was written during this loss, not an earlier
// one. Time is the watch's arrival on this agent's own clock, so no two
// nodes' clocks are compared; a deferral seen in the informer's initial
// list has no known start and never counts (the slow path decides), nor
// does one whose member list merely changes while it defers keep anything
// but its first time.
type Deferrals struct {
	mu    sync.Mutex
	since map[string]time.Time // zero: already deferring when this agent started watching
}

// NewDeferrals is empty.
func NewDeferrals() *Deferrals { return &Deferrals{since: map[string]time.Time{}} }

// defers reports whether an L2Announcer says its agent defers.
func defers(an *mooringv1.L2Announcer) bool {
	return an != nil && len(an.Status.Members) > 0 && !slices.Contains(an.Status.Members, an.Name)
}

// observe records a new version of an L2Announcer (old nil for an add; in
// the informer's initial list when initial) seen at now.
func (d *Deferrals) observe(old, cur *mooringv1.L2Announcer, now time.Time, initial bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch {
	case !defers(cur):
		delete(d.since, cur.Name)
	case initial:
		d.since[cur.Name] = time.Time{}
	case defers(old):
		// The same deferral, rewritten: it keeps the time it started.
		if _, ok := d.since[cur.Name]; !ok {
			d.since[cur.Name] = time.Time{}
		}
	default: // it starts deferring (or a new object that defers)
		d.since[cur.Name] = now
	}
}

func (d *Deferrals) forget(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.since, name)
}

// current reports whether node defers now with a deferral that started no
// earlier than deferralGrace before heldSince.
func (d *Deferrals) current(node string, heldSince time.Time) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	t, ok := d.since[node]
	return ok && !t.IsZero() && !t.Before(heldSince.Add(-deferralGrace))
}

// Handler feeds the deferrals from the L2Announcer informer.
func (d *Deferrals) Handler(clk clock.PassiveClock) toolscache.ResourceEventHandler {
	return toolscache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if an, ok := obj.(*mooringv1.L2Announcer); ok {
				d.observe(nil, an, clk.Now(), initial)
			}
		},
		UpdateFunc: func(oldObj, obj any) {
			old, _ := oldObj.(*mooringv1.L2Announcer)
			if an, ok := obj.(*mooringv1.L2Announcer); ok {
				d.observe(old, an, clk.Now(), false)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if an, ok := obj.(*mooringv1.L2Announcer); ok {
				d.forget(an.Name)
			}
		},
	}
}
