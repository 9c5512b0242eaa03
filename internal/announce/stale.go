package announce

import (
	"net/netip"
	"slices"
	"strings"
)

// LocalAddr is an address configured on one of the local node's interfaces.
type LocalAddr struct {
	Addr    netip.Addr
	IfIndex int
	IfName  string
}

// Stale is an announced address that the local kernel answers for by
// itself, beside (or instead of) the elected owner: the forgotten kube-ipvs0
// trap, which makes every such node a second responder.
type Stale struct {
	Addr netip.Addr
	// On is the interface holding the address, Via the interface on which
	// the kernel would answer ARP/NDP for it.
	On, Via string
}

// ArpIgnoreAll is the key of net.ipv4.conf.all.arp_ignore in StaleLocal's
// arpIgnore map.
const ArpIgnoreAll = "all"

// StaleLocal finds the announced addresses (owners) configured locally where
// the kernel would answer for them on a segment interface (listen, see
// Result.Listen). arpIgnore holds net.ipv4.conf.<name>.arp_ignore by
// interface name plus ArpIgnoreAll; a missing key means the kernel default 0.
//
// The kernel's rule: with the effective arp_ignore (the larger of "all" and
// the interface's) at 0, Linux answers an ARP request arriving on any
// interface for any address of any local interface; at 1 or more only for
// addresses of the receiving interface. IPv6 only answers neighbour
// solicitations for addresses of the receiving interface.
func StaleLocal(owners []Owner, configured []LocalAddr, listen []Interface, arpIgnore map[string]int) []Stale {
	var out []Stale
	for _, c := range configured {
		a := c.Addr.Unmap().WithZone("")
		if _, ok := slices.BinarySearchFunc(owners, a, func(o Owner, a netip.Addr) int { return o.Addr.Compare(a) }); !ok {
			continue
		}
		for _, ifi := range listen {
			if c.IfIndex == ifi.Index || (a.Is4() && max(arpIgnore[ArpIgnoreAll], arpIgnore[ifi.Name]) == 0) {
				out = append(out, Stale{Addr: a, On: c.IfName, Via: ifi.Name})
				break
			}
		}
	}
	slices.SortFunc(out, func(x, y Stale) int {
		if c := x.Addr.Compare(y.Addr); c != 0 {
			return c
		}
		return strings.Compare(x.On, y.On)
	})
	return slices.Compact(out)
}
