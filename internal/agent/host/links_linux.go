//go:build linux

package host

import (
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// Inspect describes every link of the process's namespace (the node's)
// for usableLinks.
func (Links) Inspect() ([]LinkInfo, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	routed := map[int]bool{}
	for _, fam := range []int{netlink.FAMILY_V4, netlink.FAMILY_V6} {
		routes, err := netlink.RouteList(nil, fam)
		if err != nil {
			return nil, fmt.Errorf("listing routes: %w", err)
		}
		for _, r := range routes {
			if r.Dst != nil {
				if ones, _ := r.Dst.Mask.Size(); ones != 0 {
					continue
				}
			}
			routed[r.LinkIndex] = true
			for _, nh := range r.MultiPath {
				routed[nh.LinkIndex] = true
			}
		}
	}
	out := make([]LinkInfo, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		li := LinkInfo{
			Name: a.Name, Index: a.Index, MAC: a.HardwareAddr,
			Up:           a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown,
			NoARP:        a.RawFlags&unix.IFF_NOARP != 0,
			Loopback:     a.Flags&net.FlagLoopback != 0,
			Ethernet:     a.EncapType == "ether" && len(a.HardwareAddr) == 6,
			Enslaved:     a.MasterIndex != 0,
			Veth:         l.Type() == "veth",
			DefaultRoute: routed[a.Index],
		}
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", a.Name, err)
		}
		for _, ad := range addrs {
			if ip, ok := netip.AddrFromSlice(ad.IP); ok {
				li.Addrs = append(li.Addrs, ip.Unmap())
			}
		}
		out = append(out, li)
	}
	return out, nil
}

// NeighbourMACs returns the link-layer addresses of the kernel's
// neighbours on the interface ifindex (any state but failed): the MACs
// known to be reachable there.
func (Links) NeighbourMACs(ifindex int) ([]net.HardwareAddr, error) {
	ns, err := netlink.NeighList(ifindex, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing the neighbours of interface %d: %w", ifindex, err)
	}
	var out []net.HardwareAddr
	for _, n := range ns {
		if len(n.HardwareAddr) == 6 && n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) == 0 {
			out = append(out, n.HardwareAddr)
		}
	}
	return out, nil
}
