package netlab

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"slices"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
)

// ProbeConn runs one probe over conn, an Ethernet-framed packet socket (for
// example from github.com/mdlayher/packet) whose WriteTo takes a
// *packet.Addr; hw is the sending interface's MAC. It closes conn. This is
// the seam for testing the probe without privileges.
func ProbeConn(ctx context.Context, conn net.PacketConn, hw net.HardwareAddr, src, addr netip.Addr, wait time.Duration) ([]net.HardwareAddr, error) {
	defer conn.Close()
	addr, src = addr.Unmap(), src.Unmap()
	frame, dst, err := solicit(hw, src, addr)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	if err := conn.SetReadDeadline(deadline); err != nil {
		return nil, fmt.Errorf("netlab: probe: setting deadline: %w", err)
	}
	// Cancellation without a deadline still has to wake the blocked read.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: dst}); err != nil {
		return nil, fmt.Errorf("netlab: probe: sending request for %s: %w", addr, err)
	}

	var macs []net.HardwareAddr
	buf := make([]byte, 1<<16)
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			break
		}
		if err != nil {
			return sortMACs(macs), fmt.Errorf("netlab: probe: reading replies: %w", err)
		}
		if mac, ok := answer(buf[:n], hw, addr); ok && !slices.ContainsFunc(macs, func(m net.HardwareAddr) bool {
			return bytes.Equal(m, mac)
		}) {
			macs = append(macs, slices.Clone(mac))
		}
	}
	return sortMACs(macs), ctx.Err()
}

func sortMACs(macs []net.HardwareAddr) []net.HardwareAddr {
	slices.SortFunc(macs, func(a, b net.HardwareAddr) int { return bytes.Compare(a, b) })
	return macs
}

// solicit builds the request frame and its Ethernet destination.
func solicit(hw net.HardwareAddr, src, addr netip.Addr) ([]byte, net.HardwareAddr, error) {
	switch {
	case addr.Is4():
		if !src.IsValid() {
			src = netip.IPv4Unspecified()
		}
		if !src.Is4() {
			return nil, nil, fmt.Errorf("netlab: probe: source %s for %s is not IPv4", src, addr)
		}
		p, err := arp.NewPacket(arp.OperationRequest, hw, src, ethernet.Broadcast, addr)
		if err != nil {
			return nil, nil, fmt.Errorf("netlab: probe: building ARP request: %w", err)
		}
		b, err := p.MarshalBinary()
		if err != nil {
			return nil, nil, err
		}
		return ethFrame(ethernet.Broadcast, hw, ethernet.EtherTypeARP, b)
	case addr.Is6():
		return neighborSolicitation(hw, src, addr)
	default:
		return nil, nil, fmt.Errorf("netlab: probe: invalid address %v", addr)
	}
}

func neighborSolicitation(hw net.HardwareAddr, src, addr netip.Addr) ([]byte, net.HardwareAddr, error) {
	if !src.IsValid() {
		src = netip.IPv6Unspecified()
	}
	if !src.Is6() {
		return nil, nil, fmt.Errorf("netlab: probe: source %s for %s is not IPv6", src, addr)
	}
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return nil, nil, fmt.Errorf("netlab: probe: %w", err)
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: addr.WithZone("")}
	// RFC 4861 7.2.2: no source link-layer option with an unspecified source.
	if !src.IsUnspecified() {
		ns.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: hw}}
	}
	icmp, err := ndp.MarshalMessageChecksum(ns, src, group)
	if err != nil {
		return nil, nil, fmt.Errorf("netlab: probe: building neighbour solicitation: %w", err)
	}
	// A fixed 40-byte IPv6 header: no extension headers, hop limit 255 as
	// RFC 4861 requires, or receivers drop the message.
	ip6 := make([]byte, 40, 40+len(icmp))
	ip6[0] = 6 << 4
	binary.BigEndian.PutUint16(ip6[4:6], uint16(len(icmp)))
	ip6[6] = 58 // ICMPv6
	ip6[7] = ndp.HopLimit
	s, g := src.As16(), group.As16()
	copy(ip6[8:24], s[:])
	copy(ip6[24:40], g[:])
	// RFC 2464: IPv6 multicast maps to 33:33 and the group's last 32 bits.
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	return ethFrame(dst, hw, ethernet.EtherTypeIPv6, append(ip6, icmp...))
}

func ethFrame(dst, src net.HardwareAddr, et ethernet.EtherType, payload []byte) ([]byte, net.HardwareAddr, error) {
	f := &ethernet.Frame{Destination: dst, Source: src, EtherType: et, Payload: payload}
	b, err := f.MarshalBinary()
	if err != nil {
		return nil, nil, fmt.Errorf("netlab: probe: building frame: %w", err)
	}
	return b, dst, nil
}

// answer reports the MAC claimed by b if b answers the probe for addr: an
// ARP reply from addr, or a neighbour advertisement for addr, addressed to
// us (or broadcast/multicast, as answers to address probes are). The claimed
// MAC (ARP sender, NA target link-layer option) is what a client would
// learn, so that is what is returned; the Ethernet source stands in when an
// NA carries no option.
func answer(b []byte, hw net.HardwareAddr, addr netip.Addr) (net.HardwareAddr, bool) {
	mac, ok := claim(b, hw, addr)
	return mac, ok && len(mac) == 6 // an Ethernet MAC, nothing else a client could learn
}

func claim(b []byte, hw net.HardwareAddr, addr netip.Addr) (net.HardwareAddr, bool) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(b); err != nil {
		return nil, false
	}
	if !bytes.Equal(f.Destination, hw) && f.Destination[0]&1 == 0 {
		return nil, false
	}
	switch f.EtherType {
	case ethernet.EtherTypeARP:
		var p arp.Packet
		if err := p.UnmarshalBinary(f.Payload); err != nil {
			return nil, false
		}
		if p.Operation != arp.OperationReply || p.SenderIP != addr {
			return nil, false
		}
		return p.SenderHardwareAddr, true
	case ethernet.EtherTypeIPv6:
		return advertisement(f.Payload, f.Source, addr)
	}
	return nil, false
}

func advertisement(ip6 []byte, ethSrc net.HardwareAddr, addr netip.Addr) (net.HardwareAddr, bool) {
	if len(ip6) < 40 || ip6[0]>>4 != 6 || ip6[6] != 58 || ip6[7] != ndp.HopLimit {
		return nil, false
	}
	end := 40 + int(binary.BigEndian.Uint16(ip6[4:6]))
	if end > len(ip6) {
		return nil, false
	}
	m, err := ndp.ParseMessage(ip6[40:end])
	if err != nil {
		return nil, false
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok || na.TargetAddress.WithZone("") != addr {
		return nil, false
	}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			return lla.Addr, true
		}
	}
	return ethSrc, true
}
