package responder

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

var (
	ourMAC    = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x01}
	clientMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0xfa}
	vip4      = netip.MustParseAddr("10.213.0.150")
	vip6      = netip.MustParseAddr("fd00:213::96")
	other4    = netip.MustParseAddr("10.213.0.151")
	other6    = netip.MustParseAddr("fd00:213::97")
	client4   = netip.MustParseAddr("10.213.0.250")
	client6   = netip.MustParseAddr("fd00:213::fa")
)

func ownsOnly(addrs ...netip.Addr) Owns {
	return func(a netip.Addr) bool {
		for _, o := range addrs {
			if a == o {
				return true
			}
		}
		return false
	}
}

// arpRequest builds the request a client sends; tweak edits the packet.
func arpRequest(t testing.TB, from net.HardwareAddr, sip, tip netip.Addr, tweak func(*arp.Packet)) []byte {
	t.Helper()
	p, err := arp.NewPacket(arp.OperationRequest, from, sip, make(net.HardwareAddr, 6), tip)
	if err != nil {
		t.Fatal(err)
	}
	if tweak != nil {
		tweak(p)
	}
	pb, _ := p.MarshalBinary()
	f := ethernet.Frame{Destination: ethernet.Broadcast, Source: from, EtherType: ethernet.EtherTypeARP, Payload: pb}
	b, err := f.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// nsFrame builds a neighbour solicitation. dst is the IPv6 destination: the
// solicited-node group of target (resolution) or target itself (NUD).
func nsFrame(from net.HardwareAddr, src, dst, target netip.Addr, ethDst net.HardwareAddr, slla bool) []byte {
	ns := &ndp.NeighborSolicitation{TargetAddress: target}
	if slla {
		ns.Options = []ndp.Option{&ndp.LinkLayerAddress{Direction: ndp.Source, Addr: from}}
	}
	body, err := ndp.MarshalMessageChecksum(ns, src, dst)
	if err != nil {
		panic(err)
	}
	pkt := make([]byte, ipv6HeaderLen+len(body))
	pkt[0] = 6 << 4
	binary.BigEndian.PutUint16(pkt[4:6], uint16(len(body)))
	pkt[6], pkt[7] = protoICMPv6, ndpHopLimit
	s, d := src.As16(), dst.As16()
	copy(pkt[8:], s[:])
	copy(pkt[24:], d[:])
	copy(pkt[40:], body)
	f := ethernet.Frame{Destination: ethDst, Source: from, EtherType: ethernet.EtherTypeIPv6, Payload: pkt}
	b, err := f.MarshalBinary()
	if err != nil {
		panic(err)
	}
	return b
}

func snm(t testing.TB, a netip.Addr) (netip.Addr, net.HardwareAddr) {
	g, err := ndp.SolicitedNodeMulticast(a)
	if err != nil {
		t.Fatal(err)
	}
	return g, multicastMAC(g)
}

func TestHandleARP(t *testing.T) {
	owns := ownsOnly(vip4, vip6)
	tests := []struct {
		name  string
		frame []byte
		want  Verdict
	}{
		{"request for owned", arpRequest(t, clientMAC, client4, vip4, nil), Answer},
		{"probe for owned (sip 0.0.0.0)", arpRequest(t, clientMAC, netip.IPv4Unspecified(), vip4, nil), Answer},
		{"request for other", arpRequest(t, clientMAC, client4, other4, nil), NotOwned},
		{"our own frame", arpRequest(t, ourMAC, vip4, client4, nil), Ignored},
		{"someone else's announcement", arpRequest(t, clientMAC, vip4, vip4, nil), Ignored},
		{"reply, not request", arpRequest(t, clientMAC, client4, vip4, func(p *arp.Packet) { p.Operation = arp.OperationReply }), Ignored},
		{"wrong protocol type", arpRequest(t, clientMAC, client4, vip4, func(p *arp.Packet) { p.ProtocolType = 0x86dd }), Ignored},
		{"wrong hardware type", arpRequest(t, clientMAC, client4, vip4, func(p *arp.Packet) { p.HardwareType = 6 }), Ignored},
		{"truncated", arpRequest(t, clientMAC, client4, vip4, nil)[:20], Ignored},
		{"empty", nil, Ignored},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, v := HandleARP(tt.frame, ourMAC, owns)
			if v != tt.want {
				t.Fatalf("verdict = %v, want %v", v, tt.want)
			}
			if (reply != nil) != (v == Answer) {
				t.Fatalf("reply present = %v with verdict %v", reply != nil, v)
			}
		})
	}
}

func TestHandleARPReplyContents(t *testing.T) {
	reply, v := HandleARP(arpRequest(t, clientMAC, client4, vip4, nil), ourMAC, ownsOnly(vip4))
	if v != Answer {
		t.Fatalf("verdict %v", v)
	}
	var f ethernet.Frame
	if err := f.UnmarshalBinary(reply); err != nil {
		t.Fatal(err)
	}
	var p arp.Packet
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(f.Destination, clientMAC) || !bytes.Equal(f.Source, ourMAC) {
		t.Errorf("ethernet %s -> %s, want %s -> %s", f.Source, f.Destination, ourMAC, clientMAC)
	}
	if p.Operation != arp.OperationReply || !bytes.Equal(p.SenderHardwareAddr, ourMAC) || p.SenderIP != vip4 ||
		!bytes.Equal(p.TargetHardwareAddr, clientMAC) || p.TargetIP != client4 {
		t.Errorf("reply = %+v", p)
	}
}

func TestGratuitousARP(t *testing.T) {
	frames, err := GratuitousARP(ourMAC, vip4)
	if err != nil {
		t.Fatal(err)
	}
	if len(frames) != 2 {
		t.Fatalf("got %d frames, want request and reply", len(frames))
	}
	wantOps := []arp.Operation{arp.OperationRequest, arp.OperationReply}
	for i, b := range frames {
		var f ethernet.Frame
		var p arp.Packet
		if err := f.UnmarshalBinary(b); err != nil {
			t.Fatal(err)
		}
		if err := p.UnmarshalBinary(f.Payload); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(f.Destination, ethernet.Broadcast) || !bytes.Equal(f.Source, ourMAC) {
			t.Errorf("frame %d: ethernet %s -> %s", i, f.Source, f.Destination)
		}
		if p.Operation != wantOps[i] || p.SenderIP != vip4 || p.TargetIP != vip4 || !bytes.Equal(p.SenderHardwareAddr, ourMAC) {
			t.Errorf("frame %d: %+v", i, p)
		}
		if p.Operation == arp.OperationReply && !bytes.Equal(p.TargetHardwareAddr, ourMAC) {
			t.Errorf("reply form: tha = %s, want sha", p.TargetHardwareAddr)
		}
		// A gratuitous frame of ours must never trigger our own reply.
		if _, v := HandleARP(b, ourMAC, ownsOnly(vip4)); v != Ignored {
			t.Errorf("frame %d: own announcement verdict %v", i, v)
		}
	}
	if _, err := GratuitousARP(ourMAC, vip6); err == nil {
		t.Error("GratuitousARP accepted an IPv6 address")
	}
}

// parseNA checks an advertisement frame end to end (IPv6 header, checksum,
// message) and returns its pieces.
func parseNA(t *testing.T, b []byte) (ethernet.Frame, netip.Addr, netip.Addr, *ndp.NeighborAdvertisement) {
	t.Helper()
	return parseNANaming(t, b, ourMAC)
}

// parseNANaming is parseNA for an advertisement whose TLLA must be mac.
func parseNANaming(t *testing.T, b []byte, mac net.HardwareAddr) (ethernet.Frame, netip.Addr, netip.Addr, *ndp.NeighborAdvertisement) {
	t.Helper()
	var f ethernet.Frame
	if err := f.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	src, dst, body, ok := parseICMPv6(f.Payload)
	if !ok {
		t.Fatal("advertisement has a bad IPv6 header or checksum")
	}
	m, err := ndp.ParseMessage(body)
	if err != nil {
		t.Fatal(err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok {
		t.Fatalf("got %T, want advertisement", m)
	}
	if len(na.Options) != 1 {
		t.Fatalf("options %v, want one TLLA", na.Options)
	}
	if lla, ok := na.Options[0].(*ndp.LinkLayerAddress); !ok || lla.Direction != ndp.Target || !bytes.Equal(lla.Addr, mac) {
		t.Fatalf("option %+v, want TLLA %s", na.Options[0], mac)
	}
	return f, src, dst, na
}

func TestHandleNDP(t *testing.T) {
	owns := ownsOnly(vip4, vip6)
	g6, gmac := snm(t, vip6)
	o6, omac := snm(t, other6)
	linkLocal := netip.MustParseAddr("fe80::fa")
	badSum := nsFrame(clientMAC, client6, g6, vip6, gmac, true)
	badSum[len(badSum)-1] ^= 0xff
	hop64 := nsFrame(clientMAC, client6, g6, vip6, gmac, true)
	hop64[14+7] = 64
	truncated := nsFrame(clientMAC, client6, g6, vip6, gmac, true)
	binary.BigEndian.PutUint16(truncated[14+4:], 200)
	tests := []struct {
		name       string
		frame      []byte
		want       Verdict
		dst        netip.Addr
		ethDst     net.HardwareAddr
		solicited  bool
		unsolicits bool
	}{
		{"multicast NS for owned", nsFrame(clientMAC, client6, g6, vip6, gmac, true), Answer, client6, clientMAC, true, false},
		{"from link-local", nsFrame(clientMAC, linkLocal, g6, vip6, gmac, true), Answer, linkLocal, clientMAC, true, false},
		{"unicast NUD probe, no SLLA", nsFrame(clientMAC, client6, vip6, vip6, ourMAC, false), Answer, client6, clientMAC, true, false},
		{"DAD probe for owned", nsFrame(clientMAC, netip.IPv6Unspecified(), g6, vip6, gmac, false), Answer, allNodes, multicastMAC(allNodes), false, false},
		{"NS for other", nsFrame(clientMAC, client6, o6, other6, omac, true), NotOwned, netip.Addr{}, nil, false, false},
		{"wrong destination group", nsFrame(clientMAC, client6, o6, vip6, omac, true), Ignored, netip.Addr{}, nil, false, false},
		{"our own frame", nsFrame(ourMAC, client6, g6, vip6, gmac, true), Ignored, netip.Addr{}, nil, false, false},
		{"bad checksum", badSum, Ignored, netip.Addr{}, nil, false, false},
		{"hop limit 64", hop64, Ignored, netip.Addr{}, nil, false, false},
		{"payload length past frame", truncated, Ignored, netip.Addr{}, nil, false, false},
		{"ARP frame", arpRequest(t, clientMAC, client4, vip4, nil), Ignored, netip.Addr{}, nil, false, false},
		{"empty", nil, Ignored, netip.Addr{}, nil, false, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			reply, v := HandleNDP(tt.frame, ourMAC, owns)
			if v != tt.want {
				t.Fatalf("verdict = %v, want %v", v, tt.want)
			}
			if v != Answer {
				if reply != nil {
					t.Fatal("reply without Answer")
				}
				return
			}
			f, src, dst, na := parseNA(t, reply)
			if !bytes.Equal(f.Destination, tt.ethDst) || !bytes.Equal(f.Source, ourMAC) {
				t.Errorf("ethernet %s -> %s, want %s -> %s", f.Source, f.Destination, ourMAC, tt.ethDst)
			}
			if src != vip6 || dst != tt.dst {
				t.Errorf("ipv6 %s -> %s, want %s -> %s", src, dst, vip6, tt.dst)
			}
			if na.TargetAddress != vip6 || !na.Override || na.Solicited != tt.solicited || na.Router {
				t.Errorf("advertisement %+v", na)
			}
		})
	}
}

func TestUnsolicitedNA(t *testing.T) {
	b, err := UnsolicitedNA(ourMAC, vip6)
	if err != nil {
		t.Fatal(err)
	}
	f, src, dst, na := parseNA(t, b)
	if !bytes.Equal(f.Destination, net.HardwareAddr{0x33, 0x33, 0, 0, 0, 1}) {
		t.Errorf("ethernet destination %s", f.Destination)
	}
	if src != vip6 || dst != allNodes || na.TargetAddress != vip6 || !na.Override || na.Solicited {
		t.Errorf("%s -> %s: %+v", src, dst, na)
	}
	if _, v := HandleNDP(b, ourMAC, ownsOnly(vip6)); v != Ignored {
		t.Errorf("own advertisement verdict %v", v)
	}
	if _, err := UnsolicitedNA(ourMAC, vip4); err == nil {
		t.Error("UnsolicitedNA accepted an IPv4 address")
	}
}

func TestSolicitedNodeMAC(t *testing.T) {
	mac, err := SolicitedNodeMAC(netip.MustParseAddr("fd00::12:3456"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (net.HardwareAddr{0x33, 0x33, 0xff, 0x12, 0x34, 0x56}); !bytes.Equal(mac, want) {
		t.Errorf("got %s, want %s", mac, want)
	}
}
