package bgpspeaker

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strconv"
	"syscall"

	"github.com/vishvananda/netlink"
)

// KernelProber probes a router with a plain (unsigned) TCP connection and,
// when that gets no answer either, asks the kernel's neighbour table
// whether the router answers ARP/NDP.
type KernelProber struct{}

// Probe implements AuthProber. It sends one SYN (the connection is closed
// at once if it opens) and reads one neighbour entry. Cost: one round trip
// or ctx's deadline.
func (KernelProber) Probe(ctx context.Context, peer, source netip.Addr, port uint16) ProbeResult {
	d := net.Dialer{}
	if source.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: source.AsSlice()}
	}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(peer.String(), strconv.Itoa(int(port))))
	switch {
	case err == nil:
		conn.Close()
		return ProbeAnswered
	case errors.Is(err, syscall.ECONNREFUSED):
		return ProbeRefused
	}
	if neighborReachable(peer) {
		return ProbeSilentReachable
	}
	return ProbeSilent
}

// neighborReachable reports whether the kernel holds a resolved
// link-layer address for a.
func neighborReachable(a netip.Addr) bool {
	family := netlink.FAMILY_V4
	if a.Is6() && !a.Is4In6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := netlink.NeighList(0, family)
	if err != nil {
		return false
	}
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || ip.Unmap() != a.Unmap() {
			continue
		}
		const resolved = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT
		if n.State&resolved != 0 {
			return true
		}
	}
	return false
}
