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
type Match struct {
	To  []netip.Addr
	Via []netip.Prefix
}

// Selects reports whether the entry with original destination origDst and
// reply source replySrc is one Match deletes. Cost: O(len(To)+len(Via)).
func (m Match) Selects(origDst, replySrc netip.Addr) bool {
	origDst, replySrc = origDst.Unmap(), replySrc.Unmap()
	if !origDst.IsValid() || !replySrc.IsValid() || origDst == replySrc {
		return false
	}
	if len(m.To) > 0 && !slices.Contains(m.To, origDst) {
		return false
	}
	return slices.ContainsFunc(m.Via, func(p netip.Prefix) bool { return p.Contains(replySrc) })
}

// Empty reports whether m can select nothing.
func (m Match) Empty() bool { return len(m.Via) == 0 }
