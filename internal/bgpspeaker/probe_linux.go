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

// KernelProber probes a router with a plain (unsigned) TCP connection and
// reads the kernel's neighbour table.
type KernelProber struct{}

// Probe implements Prober. It sends one SYN (the connection is closed at
// once if it opens). Cost: one round trip or ctx's deadline.
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
	return ProbeSilent
}

// Link implements Prober: whether the kernel holds a resolved link-layer
// address for a, or failed to resolve it. Cost: one netlink dump of the
// family's neighbour table.
func (KernelProber) Link(a netip.Addr) LinkState {
	family := netlink.FAMILY_V4
	if a.Is6() && !a.Is4In6() {
		family = netlink.FAMILY_V6
	}
	neighs, err := netlink.NeighList(0, family)
	if err != nil {
		return LinkUnknown
	}
	for _, n := range neighs {
		ip, ok := netip.AddrFromSlice(n.IP)
		if !ok || ip.Unmap() != a.Unmap() {
			continue
		}
		const resolved = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE | netlink.NUD_PERMANENT
		switch {
		case n.State&resolved != 0:
			return LinkReachable
		case n.State&(netlink.NUD_FAILED|netlink.NUD_INCOMPLETE) != 0:
			return LinkFailed
		}
	}
	return LinkUnknown
}
