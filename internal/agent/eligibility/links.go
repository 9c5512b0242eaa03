package eligibility

import (
	"encoding/hex"
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/agent/host"
)

// Interface-choice reasons, as the log and the Node Event spell them.
const (
	whyDown      = "down"
	whyNoARP     = "NOARP"
	whyLoopback  = "loopback"
	whyNotEther  = "not Ethernet"
	whyEnslaved  = "a bridge or bond port (use its master)"
	whyVeth      = "a veth (a pod's, unless it carries the node's address)"
	whyNoNodeIPs = "the node's InternalIP is on no usable interface and there is no default route"
)

// usableLinks decides where this node may answer: usable are the links a
// policy's interfaces expressions may pick (up, ARP, Ethernet, not a
// bridge/bond port, not a veth unless it carries a node address); defaults
// are the ones a policy that names no interfaces uses: the usable links
// carrying one of nodeIPs (the Node's InternalIP addresses), else those
// carrying a default route. unusable says why every other link was left
// out. Pure; the results are sorted by name.
func usableLinks(links []host.LinkInfo, nodeIPs []netip.Addr) (usable, defaults []string, unusable map[string]string) {
	unusable = map[string]string{}
	carries := func(l host.LinkInfo) bool {
		return slices.ContainsFunc(l.Addrs, func(a netip.Addr) bool { return slices.Contains(nodeIPs, a.Unmap()) })
	}
	var routed []string
	for _, l := range links {
		switch {
		case l.Loopback:
			unusable[l.Name] = whyLoopback
		case !l.Up:
			unusable[l.Name] = whyDown
		case l.NoARP:
			unusable[l.Name] = whyNoARP
		case !l.Ethernet:
			unusable[l.Name] = whyNotEther
		case l.Enslaved:
			unusable[l.Name] = whyEnslaved
		case l.Veth && !carries(l):
			unusable[l.Name] = whyVeth
		default:
			usable = append(usable, l.Name)
			if carries(l) {
				defaults = append(defaults, l.Name)
			}
			if l.DefaultRoute {
				routed = append(routed, l.Name)
			}
		}
	}
	if len(defaults) == 0 {
		defaults = routed
	}
	slices.Sort(usable)
	slices.Sort(defaults)
	return slices.Compact(usable), slices.Compact(defaults), unusable
}

// NetworkPrefixes turns an interface's addresses, with their prefix
// lengths, into the networks they lie in as the L2Announcer lists them
// (192.168.1.10/24 gives 192.168.1.0/24): link-local networks
// (fe80::/10, 169.254.0.0/16) are left out, since no pool's addresses are
// announced there; the result is deduplicated and sorted, nil when empty.
// Pure.
func NetworkPrefixes(addrs []netip.Prefix) []string {
	var nets []netip.Prefix
	for _, p := range addrs {
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		if !p.IsValid() || p.Addr().IsLinkLocalUnicast() {
			continue
		}
		nets = append(nets, p.Masked())
	}
	slices.SortFunc(nets, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	var out []string
	for _, p := range slices.Compact(nets) {
		out = append(out, p.String())
	}
	return out
}

// macsOf returns the MACs of the named links (12 hex digits), for
// NodeMeta.HW.
func macsOf(links []host.LinkInfo, names []string) map[string]string {
	var out map[string]string
	for _, l := range links {
		if len(l.MAC) == 6 && slices.Contains(names, l.Name) {
			if out == nil {
				out = map[string]string{}
			}
			out[l.Name] = hex.EncodeToString(l.MAC)
		}
	}
	return out
}
