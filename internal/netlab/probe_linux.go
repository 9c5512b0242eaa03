package netlab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/arpprobe"
)

// Probe asks, from host h's eth0, who owns addr — ONE ARP request for IPv4,
// ONE neighbour solicitation to the solicited-node multicast address for
// IPv6, sent from h's own address — and returns every distinct MAC that
// answered within wait, sorted. No answer is not an error: the result is
// empty. If ctx ends first, Probe returns what it saw with ctx's error.
//
// More than one MAC means more than one machine claims the address (a
// stale VIP on a node's lo with arp_ignore=0, two announcers): the client
// keeps whichever reply it gets first.
func Probe(ctx context.Context, h *Host, addr netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	ifi, err := h.Interface()
	if err != nil {
		return nil, err
	}
	src := h.Addr4
	if arpprobe.FamilyOf(addr) == arpprobe.IPv6 {
		src = h.Addr6
	}
	var conn net.PacketConn
	// The socket must be created on a thread inside h's namespace; it may be
	// used from any goroutine afterwards.
	err = h.Do(func() error {
		var err error
		conn, err = arpprobe.Listen(ifi, arpprobe.FamilyOf(addr))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("netlab: %s: %w", h.Name, err)
	}
	return ProbeConn(ctx, conn, ifi.HardwareAddr, src, addr, wait)
}

// ProbeInterface is Probe for an interface of the calling thread's own
// namespace (see arpprobe.ProbeInterface). src is the sender address to use
// (one of ifi's); the zero Addr sends an address probe instead (sender
// 0.0.0.0 per RFC 5227, or :: as in duplicate address detection, answered
// to all-nodes). Only ifi.Index and ifi.HardwareAddr are used.
func ProbeInterface(ctx context.Context, ifi *net.Interface, src, addr netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	got, err := arpprobe.ProbeInterface(ctx, ifi, []netip.Addr{addr}, probeOptions(src, addr, wait))
	return got.MACs(addr), err
}
