package podipamctl

import (
	"errors"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/podipam"
)

// RouteProtocol marks the routes Mooring installs (rtnetlink protocol
// number), so that it touches no other route: `ip route show proto 199`.
const RouteProtocol = netlink.RouteProtocol(199)

// ApplyRoutes makes the main table's Mooring routes exactly want: missing
// or changed ones are replaced, Mooring routes not in want are deleted,
// every other route is left alone. h is a netlink handle in the node's
// namespace (nil: the current one).
func ApplyRoutes(h *netlink.Handle, want []podipam.Route) error {
	if h == nil {
		var err error
		if h, err = netlink.NewHandle(); err != nil {
			return err
		}
		defer h.Close()
	}
	wanted := map[netip.Prefix]netip.Addr{}
	for _, r := range want {
		wanted[r.Dst] = r.Via
	}
	filter := &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN}
	have, err := h.RouteListFiltered(netlink.FAMILY_ALL, filter, netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
	if err != nil {
		return fmt.Errorf("list Mooring pod routes: %w", err)
	}
	var errs []error
	current := map[netip.Prefix]netip.Addr{}
	for _, r := range have {
		if r.Dst == nil {
			continue
		}
		dst, _ := netip.AddrFromSlice(r.Dst.IP)
		ones, _ := r.Dst.Mask.Size()
		p := netip.PrefixFrom(dst.Unmap(), ones)
		gw, _ := netip.AddrFromSlice(r.Gw)
		if via, ok := wanted[p]; ok && via == gw.Unmap() {
			current[p] = via
			continue
		}
		if err := h.RouteDel(&r); err != nil {
			errs = append(errs, fmt.Errorf("delete pod route %s: %w", p, err))
		}
	}
	for _, r := range want {
		if _, ok := current[r.Dst]; ok {
			continue
		}
		nr := &netlink.Route{
			Dst:      &net.IPNet{IP: r.Dst.Addr().AsSlice(), Mask: net.CIDRMask(r.Dst.Bits(), r.Dst.Addr().BitLen())},
			Gw:       r.Via.AsSlice(),
			Protocol: RouteProtocol,
			Table:    unix.RT_TABLE_MAIN,
		}
		if err := h.RouteReplace(nr); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w (is %s on a segment this node is on?)", r.Dst, r.Via, err, r.Via))
		}
	}
	return errors.Join(errs...)
}
