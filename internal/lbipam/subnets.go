package lbipam

import (
	"net/netip"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// OutsideSubnets returns the parts of the pool's valid blocks that lie in
// none of subnets, lowest first: addresses that would be handed out but
// that no announcing node can answer ARP/NDP for, because no node sits on
// their segment (seed 002, failure 1). Cost: O(B * S log S).
func OutsideSubnets(p Pool, subnets []netip.Prefix) []ipalloc.Range {
	cover := make([]ipalloc.Range, 0, len(subnets))
	for _, s := range subnets {
		if s.IsValid() {
			cover = append(cover, ipalloc.PrefixRange(s.Masked()))
		}
	}
	cover = ipalloc.Normalize(cover)
	var out []ipalloc.Range
	for _, r := range compilePool(p).valid {
		out = append(out, ipalloc.Subtract(r, cover)...)
	}
	return out
}
