package agent

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// The split-brain probe's frames: one request per address (an ARP request,
// or a neighbour solicitation to the solicited-node group) and a parser
// that turns any frame into "mac claims addr", or nothing. The parser sees
// whatever arrives on the segment, so it must never panic (fuzzed).

// probeRequest builds the request for addr from an interface with MAC hw and
// source address src (invalid: unspecified, an address probe).
func probeRequest(hw net.HardwareAddr, src, addr netip.Addr) ([]byte, net.HardwareAddr, error) {
	if addr.Is4() {
		if !src.Is4() {
			src = netip.IPv4Unspecified()
		}
		p, err := arp.NewPacket(arp.OperationRequest, hw, src, ethernet.Broadcast, addr)
		if err != nil {
			return nil, nil, fmt.Errorf("building an ARP request for %s: %w", addr, err)
		}
		b, err := p.MarshalBinary()
		if err != nil {
			return nil, nil, err
		}
		return frame(ethernet.Broadcast, hw, ethernet.EtherTypeARP, b)
	}
	if !src.Is6() {
		src = netip.IPv6Unspecified()
	}
	group, err := ndp.SolicitedNodeMulticast(addr)
	if err != nil {
		return nil, nil, err
	}
	ns := &ndp.NeighborSolicitation{TargetAddress: addr}
	if !src.IsUnspecified() { // RFC 4861 §7.2.2: no option from ::
		ns.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: hw}}
	}
	body, err := ndp.MarshalMessageChecksum(ns, src, group)
	if err != nil {
		return nil, nil, fmt.Errorf("building a neighbour solicitation for %s: %w", addr, err)
	}
	pkt := make([]byte, 40, 40+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:6], uint16(len(body)))
	pkt[6], pkt[7] = 58, ndp.HopLimit // ICMPv6; NDP is only valid with hop limit 255
	s, g := src.As16(), group.As16()
	copy(pkt[8:24], s[:])
	copy(pkt[24:40], g[:])
	dst := net.HardwareAddr{0x33, 0x33, g[12], g[13], g[14], g[15]}
	return frame(dst, hw, ethernet.EtherTypeIPv6, append(pkt, body...))
}

func frame(dst, src net.HardwareAddr, et ethernet.EtherType, payload []byte) ([]byte, net.HardwareAddr, error) {
	f := &ethernet.Frame{Destination: dst, Source: src, EtherType: et, Payload: payload}
	b, err := f.MarshalBinary()
	return b, dst, err
}

// parseClaim reports the address and MAC that frame claims: an ARP reply
// (its sender), or a neighbour advertisement (its target link-layer option,
// else the Ethernet source). Frames from own (our interface) are ignored.
func parseClaim(b []byte, own net.HardwareAddr) (netip.Addr, net.HardwareAddr, bool) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(b); err != nil || bytes.Equal(f.Source, own) {
		return netip.Addr{}, nil, false
	}
	var (
		addr netip.Addr
		mac  net.HardwareAddr
	)
	switch f.EtherType {
	case ethernet.EtherTypeARP:
		var p arp.Packet
		if err := p.UnmarshalBinary(f.Payload); err != nil || p.Operation != arp.OperationReply {
			return netip.Addr{}, nil, false
		}
		addr, mac = p.SenderIP, p.SenderHardwareAddr
	case ethernet.EtherTypeIPv6:
		var ok bool
		if addr, mac, ok = parseNA(f.Payload, f.Source); !ok {
			return netip.Addr{}, nil, false
		}
	default:
		return netip.Addr{}, nil, false
	}
	if len(mac) != 6 || bytes.Equal(mac, own) {
		return netip.Addr{}, nil, false
	}
	return addr.Unmap(), mac, true
}

func parseNA(ip6 []byte, ethSrc net.HardwareAddr) (netip.Addr, net.HardwareAddr, bool) {
	if len(ip6) < 40 || ip6[0]>>4 != 6 || ip6[6] != 58 || ip6[7] != ndp.HopLimit {
		return netip.Addr{}, nil, false
	}
	end := 40 + int(binary.BigEndian.Uint16(ip6[4:6]))
	if end > len(ip6) {
		return netip.Addr{}, nil, false
	}
	m, err := ndp.ParseMessage(ip6[40:end])
	if err != nil {
		return netip.Addr{}, nil, false
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		return netip.Addr{}, nil, false
	}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target {
			return na.TargetAddress.WithZone(""), lla.Addr, true
		}
	}
	return na.TargetAddress.WithZone(""), ethSrc, true
}
