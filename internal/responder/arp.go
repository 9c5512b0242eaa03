package responder

import (
	"bytes"
	"net"
	"net/netip"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

// Verdict says what HandleARP or HandleNDP made of a frame.
type Verdict uint8

const (
	// Ignored: not a request for an address (wrong protocol, malformed, sent
	// by us, or an announcement rather than a question).
	Ignored Verdict = iota
	// NotOwned: a well-formed request for an address this interface does not
	// own. It is counted, never answered.
	NotOwned
	// Answer: a request for an owned address; the reply frame is returned.
	Answer
)

func (v Verdict) String() string {
	switch v {
	case Ignored:
		return "ignored"
	case NotOwned:
		return "not-owned"
	case Answer:
		return "answer"
	default:
		return "unknown"
	}
}

// Owns reports whether an address is in the table of one interface.
type Owns func(netip.Addr) bool

// Claims reports whether an address is in the table of one interface and
// the MAC its answers name: nil for the interface's own, another node's
// while this one hands the address over to that node (Change.Claim).
type Claims func(netip.Addr) (net.HardwareAddr, bool)

// claimsOwn is owns answering with the interface's own MAC.
func claimsOwn(owns Owns) Claims {
	return func(a netip.Addr) (net.HardwareAddr, bool) { return nil, owns(a) }
}

// HandleARP decides whether the Ethernet frame is an ARP request that ifMAC's
// interface must answer and, if so, returns the reply frame (unicast to the
// requester). It is pure: no sockets, no clock.
//
// ARP probes (RFC 5227, sender IP 0.0.0.0) for an owned address are answered
// so that a host about to claim it sees the conflict. Announcements from
// others (sender IP == target IP) are not answered: replying would start a
// war with a second announcer instead of leaving the decision to the agent.
func HandleARP(frame []byte, ifMAC net.HardwareAddr, owns Owns) ([]byte, Verdict) {
	return HandleARPClaims(frame, ifMAC, claimsOwn(owns))
}

// HandleARPClaims is HandleARP whose reply names the MAC claims gives
// (the interface's own when nil) as the sender hardware address; the
// Ethernet source is always the interface's own, so switches keep
// learning each MAC where it is.
func HandleARPClaims(frame []byte, ifMAC net.HardwareAddr, claims Claims) ([]byte, Verdict) {
	var f ethernet.Frame
	if err := f.UnmarshalBinary(frame); err != nil || f.EtherType != ethernet.EtherTypeARP {
		return nil, Ignored
	}
	if bytes.Equal(f.Source, ifMAC) || f.VLAN != nil || f.ServiceVLAN != nil {
		return nil, Ignored
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		return nil, Ignored
	}
	if p.Operation != arp.OperationRequest || p.HardwareType != 1 ||
		p.ProtocolType != uint16(ethernet.EtherTypeIPv4) ||
		p.HardwareAddrLength != 6 || p.IPLength != 4 {
		return nil, Ignored
	}
	if bytes.Equal(p.SenderHardwareAddr, ifMAC) || p.SenderIP == p.TargetIP {
		return nil, Ignored
	}
	mac, ok := claims(p.TargetIP)
	if !ok {
		return nil, NotOwned
	}
	if mac == nil {
		mac = ifMAC
	}
	reply, err := arpFrameFrom(ifMAC, arp.OperationReply, mac, p.TargetIP,
		p.SenderHardwareAddr, p.SenderIP, p.SenderHardwareAddr)
	if err != nil {
		return nil, Ignored
	}
	return reply, Answer
}

// GratuitousARP returns the two forms of gratuitous ARP for ip on the
// interface with hardware address mac, both broadcast: a request with
// sender IP == target IP, and a reply with sender IP == target IP and
// target MAC == sender MAC. Hosts differ in which form updates their cache
// (Linux takes either when arp_accept=0 and it already has an entry, which is
// exactly the failover case), so both are sent.
func GratuitousARP(mac net.HardwareAddr, ip netip.Addr) ([][]byte, error) {
	req, err := arpFrame(arp.OperationRequest, mac, ip, ethernet.Broadcast, ip, ethernet.Broadcast)
	if err != nil {
		return nil, err
	}
	rep, err := arpFrame(arp.OperationReply, mac, ip, mac, ip, ethernet.Broadcast)
	if err != nil {
		return nil, err
	}
	return [][]byte{req, rep}, nil
}

// arpFrame builds one Ethernet frame carrying an ARP packet. The request form
// of gratuitous ARP carries the broadcast address as target MAC; the arp
// package accepts it there.
func arpFrame(op arp.Operation, sha net.HardwareAddr, spa netip.Addr,
	tha net.HardwareAddr, tpa netip.Addr, ethDst net.HardwareAddr) ([]byte, error) {
	return arpFrameFrom(sha, op, sha, spa, tha, tpa, ethDst)
}

// arpFrameFrom is arpFrame sent from the Ethernet address ethSrc.
func arpFrameFrom(ethSrc net.HardwareAddr, op arp.Operation, sha net.HardwareAddr, spa netip.Addr,
	tha net.HardwareAddr, tpa netip.Addr, ethDst net.HardwareAddr) ([]byte, error) {
	if op == arp.OperationRequest && bytes.Equal(tha, ethernet.Broadcast) {
		// RFC 5227 announcements put zeros in THA; the arp package wants a
		// 6-byte address, so use the zero MAC.
		tha = make(net.HardwareAddr, 6)
	}
	p, err := arp.NewPacket(op, sha, spa, tha, tpa)
	if err != nil {
		return nil, err
	}
	pb, err := p.MarshalBinary()
	if err != nil {
		return nil, err
	}
	f := ethernet.Frame{
		Destination: ethDst,
		Source:      ethSrc,
		EtherType:   ethernet.EtherTypeARP,
		Payload:     pb,
	}
	return f.MarshalBinary()
}
