//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/membership"
)

// KernelCheck is gossip's second opinion (membership.NodeCheck): one ARP
// request (IPv4) or neighbour solicitation (IPv6) to a member's node
// address, answered by that node's kernel whether or not its agent runs.
// It asks only about addresses on a directly attached segment: through a
// router the answer would be the router's.
func KernelCheck(wait time.Duration) membership.NodeCheck {
	return func(ctx context.Context, addr netip.Addr) (bool, error) {
		routes, err := netlink.RouteGet(addr.AsSlice())
		if err != nil {
			return false, fmt.Errorf("route to %s: %w", addr, err)
		}
		if len(routes) == 0 {
			return false, fmt.Errorf("no route to %s", addr)
		}
		r := routes[0]
		if r.Gw != nil {
			return false, fmt.Errorf("%s is reached through the router %s: no link-layer check", addr, r.Gw)
		}
		ifi, err := net.InterfaceByIndex(r.LinkIndex)
		if err != nil {
			return false, fmt.Errorf("interface %d towards %s: %w", r.LinkIndex, addr, err)
		}
		src4, src6 := sourceAddrs(r.LinkIndex)
		if src, ok := netip.AddrFromSlice(r.Src); ok && src.Unmap().Is4() == addr.Is4() {
			if src = src.Unmap(); src.Is4() {
				src4 = src
			} else {
				src6 = src
			}
		}
		got, err := arpprobe.ProbeInterface(ctx, ifi, []netip.Addr{addr}, arpprobe.Options{
			Src4: src4, Src6: src6, Wait: wait, ExcludeOwn: true,
		})
		if len(got.MACs(addr)) > 0 {
			return true, nil
		}
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			return false, err
		}
		return false, nil
	}
}
