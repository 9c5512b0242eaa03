package podipam

import (
	"fmt"
	"net/netip"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// Family is an IP family.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// Bits is the address length of the family.
func (f Family) Bits() int {
	if f == IPv6 {
		return 128
	}
	return 32
}

// FamilyOf returns the family of p.
func FamilyOf(p netip.Prefix) Family {
	if p.Addr().Is4() {
		return IPv4
	}
	return IPv6
}

// overlaps reports whether a and b share an address.
func overlaps(a, b netip.Prefix) bool { return a.Overlaps(b) }

// contains reports whether inner lies entirely inside outer.
func contains(outer, inner netip.Prefix) bool {
	return outer.Bits() <= inner.Bits() && outer.Contains(inner.Addr())
}

// BlockSize is the number of addresses a /bits block holds, capped at
// 1<<62 so that IPv6 sizes stay comparable integers.
func BlockSize(f Family, bits int) uint64 {
	host := f.Bits() - bits
	if host >= 62 {
		return 1 << 62
	}
	return 1 << host
}

// Usable is how many addresses of a block pods may take: every address
// except the network address (Linux bridges use it as nothing, but tools
// still treat it specially) and, for IPv4, the broadcast address. The
// gateway is taken from the usable ones by the node, not here.
func Usable(p netip.Prefix) uint64 {
	n := BlockSize(FamilyOf(p), p.Bits())
	switch {
	case FamilyOf(p) == IPv4 && n > 2:
		return n - 2
	case n > 1:
		return n - 1
	}
	return n
}

// alignUp returns the first address >= a that starts a /bits block, and
// false when there is none (the family's address space ends).
func alignUp(a netip.Addr, bits int) (netip.Addr, bool) {
	p := netip.PrefixFrom(a, bits).Masked()
	if p.Addr() == a {
		return a, true
	}
	next := ipalloc.LastAddr(p).Next()
	return next, next.IsValid()
}

// checkMask validates a mask size for a CIDR of family f.
func checkMask(cidr netip.Prefix, mask int) error {
	if mask < cidr.Bits() || mask > FamilyOf(cidr).Bits() {
		return fmt.Errorf("%w: mask size /%d does not fit %s: use a mask size between /%d and /%d",
			ErrInvalidPool, mask, cidr, cidr.Bits(), FamilyOf(cidr).Bits())
	}
	return nil
}
