package lbipam

import (
	"fmt"
	"net/netip"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// MaxIPv6BlockBits is the shortest IPv6 prefix a pool block may span: a
// block (CIDR or range) must lie inside one /48, a whole site's allocation
// (RFC 6177). Anything larger is a typo such as ::/0 or 2000::/3, not a set
// of Service addresses; the allocator's memory does not depend on it
// (docs/lbipam.md). The CRD's CEL rules check the same limit.
const MaxIPv6BlockBits = 48

// unusable lists the addresses that can never be a Service's: nothing sends
// traffic to them across a network, or every host treats them as its own.
// The CRD's CEL rules (api/v1alpha1/pool_types.go) refuse the same at
// admission; this list also catches pools admitted before those rules.
var unusable = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), `"this network" (0.0.0.0/8, a source address only, with the unspecified 0.0.0.0)`},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback (127.0.0.0/8)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.0.0/16)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast (224.0.0.0/4)"},
	{netip.MustParsePrefix("255.255.255.255/32"), "the limited broadcast address (255.255.255.255)"},
	{netip.MustParsePrefix("::/128"), "the unspecified address (::)"},
	{netip.MustParsePrefix("::1/128"), "loopback (::1)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local (fe80::/10)"},
	{netip.MustParsePrefix("ff00::/8"), "multicast (ff00::/8)"},
}

// UnusableAddr says what kind of address a is when it can never be a
// Service address (e.g. "loopback (127.0.0.0/8)"), or "".
func UnusableAddr(a netip.Addr) string {
	a = a.Unmap()
	for _, u := range unusable {
		if u.prefix.Contains(a) {
			return u.what
		}
	}
	return ""
}

// unusableProblem says why the block can never hold Service addresses, or
// "": a /0, a block overlapping an unusable prefix, or an IPv6 block not
// inside one /MaxIPv6BlockBits. The block is already valid (validateBlock).
func unusableProblem(b Block) string {
	r := ipalloc.Range{First: b.First, Last: b.Last}
	name := fmt.Sprintf("spec.blocks[%d] (%s)", b.Index, r)
	if b.FromCIDR {
		name = fmt.Sprintf("spec.blocks[%d] (%s/%d)", b.Index, b.First, b.Bits)
	}
	const fix = "use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	if b.FromCIDR && b.Bits == 0 {
		return fmt.Sprintf("%s is every address of its family, the nodes' own, loopback and multicast included: %s", name, fix)
	}
	for _, u := range unusable {
		if r.Overlaps(ipalloc.PrefixRange(u.prefix)) {
			return fmt.Sprintf("%s contains %s addresses, which can never be a Service address: %s", name, u.what, fix)
		}
	}
	if b.First.Is6() && !netip.PrefixFrom(b.First, MaxIPv6BlockBits).Masked().Contains(b.Last) {
		return fmt.Sprintf("%s is larger than one /%d, the most an IPv6 pool block may span (a whole site's allocation; see docs/lbipam.md): %s", name, MaxIPv6BlockBits, fix)
	}
	return ""
}
