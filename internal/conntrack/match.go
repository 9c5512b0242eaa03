package conntrack

import (
	"net/netip"
	"slices"
)

// Match selects the entries to delete: connections to one of To (the
// addresses a client dialled: LoadBalancer addresses; empty means any)
// that were translated to an endpoint inside Via (the dead node's pod
// ranges and node addresses). An entry whose reply comes from the address
// the client dialled was not translated and is left alone: it is nobody's
// Service traffic.
//
// With Unreplied, only entries that have seen no reply are selected: the
// connection attempts pinned to an endpoint that never answered (every
// retransmitted SYN, and a new connection reusing the client port, would
// follow them). Those are safe to delete even if the node was alive after
// all: the next SYN is simply load-balanced again. An established
// connection's entry is kept: deleting it would reset a live connection on
// a false alarm, and to a dead endpoint it cannot succeed anyway.
type Match struct {
	To        []netip.Addr
	Via       []netip.Prefix
	Unreplied bool
}

// Selects reports whether the entry with original destination origDst,
// reply source replySrc and whether it has seen a reply is one Match
// deletes. Cost: O(len(To)+len(Via)).
func (m Match) Selects(origDst, replySrc netip.Addr, replied bool) bool {
	origDst, replySrc = origDst.Unmap(), replySrc.Unmap()
	if !origDst.IsValid() || !replySrc.IsValid() || origDst == replySrc || m.Unreplied && replied {
		return false
	}
	if len(m.To) > 0 && !slices.Contains(m.To, origDst) {
		return false
	}
	return slices.ContainsFunc(m.Via, func(p netip.Prefix) bool { return p.Contains(replySrc) })
}

// Empty reports whether m can select nothing.
func (m Match) Empty() bool { return len(m.Via) == 0 }
