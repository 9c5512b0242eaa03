package failover

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// KernelRoutes reads a router's next hops for an address from its kernel
// routing table (what zebra installed: the router's FIB), through a
// netlink handle bound to the router's network namespace (OpenKernelRoutes
// for a path such as the lab's /proc/PID/task/TID/ns/net).
type KernelRoutes struct {
	Handle *netlink.Handle
}

// OpenKernelRoutes binds a KernelRoutes to the namespace at path; Close it.
func OpenKernelRoutes(path string) (*KernelRoutes, error) {
	ns, err := netns.GetFromPath(path)
	if err != nil {
		return nil, fmt.Errorf("opening the router's namespace %s: %w", path, err)
	}
	defer ns.Close() // the handle keeps the namespace
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		return nil, fmt.Errorf("netlink in the router's namespace %s: %w", path, err)
	}
	return &KernelRoutes{Handle: h}, nil
}

// Close releases the handle.
func (k *KernelRoutes) Close() error {
	k.Handle.Close()
	return nil
}

// Nexthops implements RouteObserver: the gateways of the route for addr's
// host prefix (/32 or /128) in the main table, sorted; none without one.
func (k *KernelRoutes) Nexthops(_ context.Context, addr netip.Addr) ([]netip.Addr, error) {
	addr = addr.Unmap()
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	dst := &net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(addr.BitLen(), addr.BitLen())}
	routes, err := k.Handle.RouteListFiltered(family, &netlink.Route{Dst: dst}, netlink.RT_FILTER_DST)
	if err != nil {
		return nil, fmt.Errorf("reading the router's route to %s: %w", addr, err)
	}
	var out []netip.Addr
	add := func(ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok {
			out = append(out, a.Unmap())
		}
	}
	for _, r := range routes {
		if r.Gw != nil {
			add(r.Gw)
		}
		for _, nh := range r.MultiPath {
			add(nh.Gw)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out), nil
}
