package agent

import (
	"context"
	"slices"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

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
//     releases the deferring ones at once (releaseLoop). So with the API server reachable, one node
//     answers each address about a second after the cut.
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

// releaseEvery paces the majority's reads of held nodes' L2Announcers.
const releaseEvery = 250 * time.Millisecond

// quorumMembers is what the core should see as the live members, given the
// live gossip members (self and held ones included), the held ones and the
// unreachable ones. Pure.
func quorumMembers(live, held, unreachable []string) (members []string, majority bool) {
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

// failSafe is membership as the agent uses it: Members applies the
// partition rule; everything else is membership's own.
type failSafe struct {
	*membership.Membership
}

func (f failSafe) quorum() ([]string, bool) {
	return quorumMembers(f.Membership.Members(), f.Membership.Held(), f.Membership.Unreachable())
}

func (f failSafe) Members() []string {
	m, _ := f.quorum()
	return m
}

// Deferring reports whether this node's side of a gossip partition is not
// the majority, and so announces nothing.
func (f failSafe) Deferring() bool {
	_, majority := f.quorum()
	return !majority
}

// releaser is what releaseLoop needs of membership.
type releaser interface {
	Held() []string
	Release(name string) bool
	Deferring() bool
}

// releaseLoop releases held nodes whose agent says through the API server
// that it defers (see above). An unreachable API server costs nothing but
// the fast path: AgentLossTimeout decides then.
func (a *Agent) releaseLoop(ctx context.Context) error {
	rel, ok := a.deps.Members.(releaser)
	if !ok || a.deps.Reader == nil {
		return nil
	}
	tick := a.deps.Clock.NewTicker(releaseEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
		held := rel.Held()
		if len(held) == 0 || rel.Deferring() {
			continue
		}
		for _, n := range held {
			if a.defersByAPI(ctx, n) && rel.Release(n) {
				a.log.Warn("gossip partition: a lost node defers (its L2Announcer says so); taking its addresses", "node", n)
			}
		}
	}
}

// defersByAPI reports whether node's L2Announcer (from the informer cache:
// a watch, no request per check) lists members without node itself: its
// agent runs and defers to them.
func (a *Agent) defersByAPI(ctx context.Context, node string) bool {
	var an mooringv1.L2Announcer
	if err := a.deps.Reader.Get(ctx, types.NamespacedName{Name: node}, &an); err != nil {
		return false
	}
	return len(an.Status.Members) > 0 && !slices.Contains(an.Status.Members, node)
}

// withAnnouncers adds the L2Announcers to the cached kinds, slimmed to the
// member list releaseLoop reads (one small object per node).
func withAnnouncers(by map[client.Object]cache.ByObject) map[client.Object]cache.ByObject {
	by[&mooringv1.L2Announcer{}] = cache.ByObject{Transform: func(obj any) (any, error) {
		an, ok := obj.(*mooringv1.L2Announcer)
		if !ok {
			return tombstoneOr(obj)
		}
		return &mooringv1.L2Announcer{TypeMeta: an.TypeMeta, ObjectMeta: slimMeta(&an.ObjectMeta),
			Status: mooringv1.L2AnnouncerStatus{Members: an.Status.Members}}, nil
	}}
	return by
}
