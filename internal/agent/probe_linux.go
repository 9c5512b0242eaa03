//go:build linux

package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/mdlayher/packet"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// rawProber sends the split-brain probes over AF_PACKET sockets of the
// process's namespace, one socket per family per round.
type rawProber struct{}

func (rawProber) Probe(ctx context.Context, ifindex int, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	ifi, err := net.InterfaceByIndex(ifindex)
	if err != nil {
		return nil, fmt.Errorf("interface %d: %w", ifindex, err)
	}
	src4, src6 := sourceAddrs(ifindex)
	out := map[netip.Addr][]net.HardwareAddr{}
	var errs []error
	for _, fam := range []struct {
		proto int
		src   netip.Addr
		is4   bool
	}{{unix.ETH_P_ARP, src4, true}, {unix.ETH_P_IPV6, src6, false}} {
		var want []netip.Addr
		for _, a := range addrs {
			if a.Is4() == fam.is4 {
				want = append(want, a)
			}
		}
		if len(want) == 0 {
			continue
		}
		if err := probeFamily(ctx, ifi, fam.proto, fam.src, want, wait, out); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
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

func probeFamily(ctx context.Context, ifi *net.Interface, proto int, src netip.Addr, addrs []netip.Addr, wait time.Duration, out map[netip.Addr][]net.HardwareAddr) error {
	conn, err := packet.Listen(ifi, packet.Raw, proto, nil)
	if err != nil {
		return fmt.Errorf("opening a probe socket on %s: %w", ifi.Name, err)
	}
	defer conn.Close()
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return err
	}
	want := map[netip.Addr]bool{}
	for _, a := range addrs {
		want[a] = true
		b, dst, err := probeRequest(ifi.HardwareAddr, src, a)
		if err != nil {
			return err
		}
		if _, err := conn.WriteTo(b, &packet.Addr{HardwareAddr: dst}); err != nil {
			return fmt.Errorf("sending a probe for %s on %s: %w", a, ifi.Name, err)
		}
	}
	buf := make([]byte, 1<<16)
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading probe answers on %s: %w", ifi.Name, err)
		}
		addr, mac, ok := parseClaim(buf[:n], ifi.HardwareAddr)
		if ok && want[addr] && !slices.ContainsFunc(out[addr], func(m net.HardwareAddr) bool { return bytes.Equal(m, mac) }) {
			out[addr] = append(out[addr], slices.Clone(mac))
		}
	}
}
