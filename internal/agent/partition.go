package agent

import (
	"slices"

	"github.com/mooringlb/mooring/internal/membership"
)

// Fail-safe partitions. When gossip is cut between groups of nodes while
// the segment still works (port 7946 blocked), each group sees the other's
// nodes answer ARP but not gossip: the kernel check keeps them for
// AgentLossTimeout, after which membership reports them Unreachable. Were
// each group then to announce everything it sees as its own, every address
// would have a responder on every side, each recording moves against the
// other.
//
// So a group that cannot prove it is the majority defers: it takes the
// unreachable nodes as the members (its own nodes excluded), which is
// exactly the majority's view of the cluster, so it owns nothing, writes
// nothing, and computes the same owners as the majority. A tie (two halves)
// goes to the half holding the smallest node name. Nodes whose kernel is
// silent are dead, not unreachable, and do not count: a lone survivor of a
// real failure keeps serving.
//
// The cost, documented: in a two-node cluster whose smaller-named node's
// agent crashes for longer than AgentLossTimeout while its kernel runs, the
// other node defers too (it cannot tell this from a partition).

// quorumMembers is what the core should see as the live members, given the
// live gossip members (self included) and the unreachable ones. Pure.
func quorumMembers(live, unreachable []string) (members []string, majority bool) {
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

func (f failSafe) Members() []string {
	m, _ := quorumMembers(f.Membership.Members(), f.Membership.Unreachable())
	return m
}

// Deferring reports whether this node's side of a gossip partition is not
// the majority, and so announces nothing.
func (f failSafe) Deferring() bool {
	_, majority := quorumMembers(f.Membership.Members(), f.Membership.Unreachable())
	return !majority
}
