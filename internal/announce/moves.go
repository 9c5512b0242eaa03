package announce

import "net/netip"

// Move is a change of owner of one address; From or To is "" when the
// address had or has no owner (new, unannounceable or gone).
type Move struct {
	Addr     netip.Addr
	From, To string
}

// Moves lists the owner changes from prev to next (both sorted by address,
// as Result.Owners is). Cost: O(len(prev) + len(next)).
func Moves(prev, next []Owner) []Move {
	var out []Move
	i, j := 0, 0
	for i < len(prev) || j < len(next) {
		switch {
		case j == len(next) || (i < len(prev) && prev[i].Addr.Less(next[j].Addr)):
			if prev[i].Node != "" {
				out = append(out, Move{Addr: prev[i].Addr, From: prev[i].Node})
			}
			i++
		case i == len(prev) || next[j].Addr.Less(prev[i].Addr):
			if next[j].Node != "" {
				out = append(out, Move{Addr: next[j].Addr, To: next[j].Node})
			}
			j++
		default:
			if prev[i].Node != next[j].Node {
				out = append(out, Move{Addr: next[j].Addr, From: prev[i].Node, To: next[j].Node})
			}
			i++
			j++
		}
	}
	return out
}
