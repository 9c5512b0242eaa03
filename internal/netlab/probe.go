package netlab

import (
	"context"
	"net"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/arpprobe"
)

// ProbeConn runs one probe for addr over conn (see arpprobe.ProbeConn),
// sent from src (the zero Addr: an address probe), and returns the distinct
// MACs that claimed addr, sorted. It closes conn. This is the seam for
// testing the probe without privileges.
func ProbeConn(ctx context.Context, conn net.PacketConn, hw net.HardwareAddr, src, addr netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	got, err := arpprobe.ProbeConn(ctx, conn, hw, []netip.Addr{addr}, probeOptions(src, addr, wait))
	return got.MACs(addr), err
}

// probeOptions puts src where a probe for addr takes its sender: the
// answers of a single-address probe are those addressed to us, our own
// included.
func probeOptions(src, addr netip.Addr, wait time.Duration) arpprobe.Options {
	o := arpprobe.Options{Wait: wait}
	if arpprobe.FamilyOf(addr) == arpprobe.IPv4 {
		o.Src4 = src
	} else {
		o.Src6 = src
	}
	return o
}
