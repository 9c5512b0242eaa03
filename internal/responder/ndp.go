package responder

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

const (
	ipv6HeaderLen  = 40
	protoICMPv6    = 58
	ndpHopLimit    = 255 // RFC 4861: NDP messages are only valid with hop limit 255.
	icmpTypeNS     = 135
	offsetICMPType = 14 + ipv6HeaderLen // in an untagged Ethernet frame
)

// allNodes is ff02::1, where unsolicited advertisements go.
var allNodes = netip.MustParseAddr("ff02::1")

// HandleNDP decides whether the Ethernet frame is an IPv6 neighbour
// solicitation that ifMAC's interface must answer and, if so, returns the
// solicited advertisement (Solicited+Override, target link-layer address
// option).
//
// Both forms of solicitation are answered: multicast to the target's
// solicited-node group (address resolution) and unicast to the target itself
// (NUD probes, which the kernel would drop because the VIP is not a local
// address). A solicitation whose destination is neither is ignored. A DAD
// probe (source ::) is answered to all-nodes without the Solicited flag, as
// RFC 4861 §7.2.4 requires, which tells the prober the address is taken.
func HandleNDP(frame []byte, ifMAC net.HardwareAddr, owns Owns) ([]byte, Verdict) {
	return HandleNDPClaims(frame, ifMAC, claimsOwn(owns))
}

// HandleNDPClaims is HandleNDP whose advertisement names the MAC claims
// gives (the interface's own when nil) as the target link-layer address;
// the Ethernet source is always the interface's own.
func HandleNDPClaims(frame []byte, ifMAC net.HardwareAddr, claims Claims) ([]byte, Verdict) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeIPv6 {
		return nil, Ignored
	}
	if bytes.Equal(f.Source, ifMAC) || f.VLAN != nil || f.ServiceVLAN != nil {
		return nil, Ignored
	}
	src, dst, body, ok := parseICMPv6(f.Payload)
	if !ok || len(body) < 2 || body[0] != icmpTypeNS || body[1] != 0 {
		return nil, Ignored
	}
	m, err := ndp.ParseMessage(body)
	if err != nil {
		return nil, Ignored
	}
	ns, ok := m.(*ndp.NeighborSolicitation)
	if !ok {
		return nil, Ignored
	}
	target := ns.TargetAddress
	if target.IsMulticast() || src.IsMulticast() {
		return nil, Ignored
	}
	snm, err := ndp.SolicitedNodeMulticast(target)
	if err != nil || (dst != target && dst != snm) {
		return nil, Ignored
	}
	mac, ok := claims(target)
	if !ok {
		return nil, NotOwned
	}
	if mac == nil {
		mac = ifMAC
	}
	na := &ndp.NeighborAdvertisement{
		Solicited:     true,
		Override:      true,
		TargetAddress: target,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	replyDst, ethDst := src, sourceLLA(ns, f.Source)
	if src.IsUnspecified() {
		na.Solicited = false
		replyDst, ethDst = allNodes, multicastMAC(allNodes)
	}
	out, err := naFrame(na, ifMAC, target, replyDst, ethDst)
	if err != nil {
		return nil, Ignored
	}
	return out, Answer
}

// UnsolicitedNA returns an unsolicited neighbour advertisement for ip from
// the interface with hardware address mac, to all-nodes, with the Override
// flag so that neighbours replace a cached (stale, dead) link-layer address.
func UnsolicitedNA(mac net.HardwareAddr, ip netip.Addr) ([]byte, error) {
	na := &ndp.NeighborAdvertisement{
		Override:      true,
		TargetAddress: ip,
		Options:       []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Target, Addr: mac}},
	}
	return naFrame(na, mac, ip, allNodes, multicastMAC(allNodes))
}

// SolicitedNodeMAC is the Ethernet multicast address on which solicitations
// for ip arrive (33:33:ff + the low 24 bits of ip). An interface must be
// told to accept it, or a real NIC filters those frames out.
func SolicitedNodeMAC(ip netip.Addr) (net.HardwareAddr, error) {
	snm, err := ndp.SolicitedNodeMulticast(ip)
	if err != nil {
		return nil, err
	}
	return multicastMAC(snm), nil
}

// sourceLLA picks where a solicited advertisement goes at layer 2: the
// solicitation's source link-layer address option if it has one, else the
// Ethernet source (NUD probes usually omit the option).
func sourceLLA(ns *ndp.NeighborSolicitation, ethSrc net.HardwareAddr) net.HardwareAddr {
	for _, o := range ns.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Source && len(lla.Addr) == 6 {
			return lla.Addr
		}
	}
	return ethSrc
}

// multicastMAC maps an IPv6 multicast address to its Ethernet group
// (RFC 2464 §7).
func multicastMAC(ip netip.Addr) net.HardwareAddr {
	b := ip.As16()
	return net.HardwareAddr{0x33, 0x33, b[12], b[13], b[14], b[15]}
}

func naFrame(na *ndp.NeighborAdvertisement, ethSrc net.HardwareAddr, src, dst netip.Addr, ethDst net.HardwareAddr) ([]byte, error) {
	body, err := ndp.MarshalMessageChecksum(na, src, dst)
	if err != nil {
		return nil, err
	}
	pkt := make([]byte, ipv6HeaderLen+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:6], uint16(len(body)))
	pkt[6] = protoICMPv6
	pkt[7] = ndpHopLimit
	s, d := src.As16(), dst.As16()
	copy(pkt[8:24], s[:])
	copy(pkt[24:40], d[:])
	copy(pkt[40:], body)
	f := ethernet.Frame{
		Destination: ethDst,
		Source:      ethSrc,
		EtherType:   ethernet.EtherTypeIPv6,
		Payload:     pkt,
	}
	return f.MarshalBinary()
}

// parseICMPv6 validates an IPv6 packet carrying ICMPv6 directly (no extension
// headers: RFC 4861 messages never carry them) with hop limit 255 and a
// correct checksum, and returns its addresses and ICMPv6 message. Ethernet
// padding beyond the payload length is dropped.
func parseICMPv6(pkt []byte) (src, dst netip.Addr, body []byte, ok bool) {
	if len(pkt) < ipv6HeaderLen || pkt[0]>>4 != 6 || pkt[6] != protoICMPv6 || pkt[7] != ndpHopLimit {
		return src, dst, nil, false
	}
	plen := int(binary.BigEndian.Uint16(pkt[4:6]))
	if plen > len(pkt)-ipv6HeaderLen {
		return src, dst, nil, false
	}
	src = netip.AddrFrom16([16]byte(pkt[8:24]))
	dst = netip.AddrFrom16([16]byte(pkt[24:40]))
	body = pkt[ipv6HeaderLen : ipv6HeaderLen+plen]
	if icmpv6Checksum(src, dst, body) != 0 {
		return src, dst, nil, false
	}
	return src, dst, body, true
}

// icmpv6Checksum folds the one's-complement sum over the IPv6 pseudo-header
// and msg; a message with a correct checksum field sums to zero.
func icmpv6Checksum(src, dst netip.Addr, msg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for len(b) >= 2 {
			sum += uint32(b[0])<<8 | uint32(b[1])
			b = b[2:]
		}
		if len(b) == 1 {
			sum += uint32(b[0]) << 8
		}
	}
	s, d := src.As16(), dst.As16()
	add(s[:])
	add(d[:])
	var l [8]byte
	binary.BigEndian.PutUint32(l[0:4], uint32(len(msg)))
	l[7] = protoICMPv6
	add(l[:])
	add(msg)
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
