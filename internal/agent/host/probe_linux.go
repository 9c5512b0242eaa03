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
)

// Prober sends the split-brain probes over AF_PACKET sockets of the
// process's namespace, one socket per family per round.
type Prober struct{}

func (Prober) Probe(ctx context.Context, ifindex int, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("interface %d: %w", ifindex, err)
	}
	src4, src6 := sourceAddrs(ifindex)
	// This node announces addrs itself, so its own answers are no split;
	// any other claim seen on the segment in the window is one, whoever it
	// was addressed to.
	got, err := arpprobe.ProbeInterface(ctx, ifi, addrs, arpprobe.Options{
		Src4: src4, Src6: src6, Wait: wait, ExcludeOwn: true, AnyDestination: true,
	})
	if err != nil && ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil // the agent is stopping: not a failed probe
	}
	return got, err
}

// sourceAddrs picks the interface's own addresses as probe sources, so
// answers come back unicast; without one the probe is an address probe.
func sourceAddrs(ifindex int) (v4, v6 netip.Addr) {
	link, err := netlink.LinkByIndex(ifindex)
	if err != nil {
		return
	}
	addrs, _ := netlink.AddrList(link, netlink.FAMILY_ALL)
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		switch ip = ip.Unmap(); {
		case !ok:
		case ip.Is4() && !v4.IsValid():
			v4 = ip
		case ip.Is6() && (!v6.IsValid() || v6.IsLinkLocalUnicast() && !ip.IsLinkLocalUnicast()):
			v6 = ip
		}
	}
	return
}
