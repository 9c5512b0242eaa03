package responder

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

// Malformed frames must never panic, and a reply may only ever be for an
// owned address.

func FuzzHandleARP(f *testing.F) {
	f.Add(arpRequest(f, clientMAC, client4, vip4, nil))
	f.Add(arpRequest(f, clientMAC, netip.IPv4Unspecified(), vip4, nil))
	f.Add(arpRequest(f, clientMAC, client4, other4, nil))
	for _, lie := range []struct{ off, val int }{{4, 200}, {5, 16}, {4, 0}, {5, 0}} { // lengths that lie
		b := arpRequest(f, clientMAC, client4, vip4, nil)
		b[14+lie.off] = byte(lie.val)
		f.Add(b)
	}
	f.Add(arpRequest(f, clientMAC, client4, vip4, func(p *arp.Packet) { p.Operation = arp.OperationReply }))
	f.Add(arpRequest(f, clientMAC, client4, vip4, nil)[:30])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply, v := HandleARP(frame, ourMAC, ownsOnly(vip4))
		if v == Answer {
			assertARPClaim(t, reply, vip4)
			if _, v2 := HandleARP(reply, ourMAC, ownsOnly(vip4)); v2 != Ignored {
				t.Fatalf("our own reply was not ignored: %v", v2)
			}
		}
		// Another interface's table (it owns nothing here): never a reply.
		if _, v := HandleARP(frame, otherMAC, ownsOnly()); v == Answer {
			t.Fatal("answered on an interface that owns nothing")
		}
		_, _ = HandleARP(frame, ourMAC, func(a netip.Addr) bool {
			if !a.Is4() {
				t.Fatalf("ARP asked about non-IPv4 address %s", a)
			}
			return true
		})
	})
}

func FuzzHandleNDP(f *testing.F) {
	g6, gmac := snm(f, vip6)
	f.Add(nsFrame(clientMAC, client6, g6, vip6, gmac, true))
	f.Add(nsFrame(clientMAC, client6, vip6, vip6, ourMAC, false))
	f.Add(nsFrame(clientMAC, netip.IPv6Unspecified(), g6, vip6, gmac, false))
	f.Add(nsFrame(clientMAC, client6, g6, other6, gmac, true))
	bad := nsFrame(clientMAC, client6, g6, vip6, gmac, true)
	bad[14+ipv6HeaderLen+24+1] = 0 // option length 0
	f.Add(bad)
	na, _ := UnsolicitedNA(clientMAC, vip6)
	f.Add(na)
	f.Add(nsFrame(clientMAC, client6, g6, vip6, gmac, true)[:60])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		reply, v := HandleNDP(frame, ourMAC, ownsOnly(vip6))
		if _, v := HandleNDP(frame, otherMAC, ownsOnly()); v == Answer {
			t.Fatal("answered on an interface that owns nothing")
		}
		if v == Answer {
			if _, _, _, ok := parseICMPv6(reply[14:]); !ok {
				t.Fatal("reply does not parse back")
			}
			assertNAClaim(t, reply, vip6)
			if _, v2 := HandleNDP(reply, ourMAC, ownsOnly(vip6)); v2 != Ignored {
				t.Fatalf("our own reply was not ignored: %v", v2)
			}
		}
	})
}

// otherMAC is a second interface of the same node.
var otherMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}

// assertARPClaim checks that an ARP reply claims exactly the owned address,
// for the answering interface's MAC, from that MAC.
func assertARPClaim(t *testing.T, reply []byte, owned netip.Addr) {
	t.Helper()
	var f ethernet.Frame
	var p arp.Packet
	if err := f.UnmarshalBinary(reply); err != nil {
		t.Fatalf("reply is no Ethernet frame: %v", err)
	}
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		t.Fatalf("reply is no ARP packet: %v", err)
	}
	if p.Operation != arp.OperationReply || p.SenderIP != owned ||
		!bytes.Equal(p.SenderHardwareAddr, ourMAC) || !bytes.Equal(f.Source, ourMAC) {
		t.Fatalf("reply claims %s at %s from %s (op %v); only %s at %s may be claimed", p.SenderIP, p.SenderHardwareAddr, f.Source, p.Operation, owned, ourMAC)
	}
}

// assertNAClaim checks that a neighbour advertisement claims exactly the
// owned address, with the answering interface's MAC as target link-layer
// address and Ethernet source.
func assertNAClaim(t *testing.T, reply []byte, owned netip.Addr) {
	t.Helper()
	var f ethernet.Frame
	if err := f.UnmarshalBinary(reply); err != nil || !bytes.Equal(f.Source, ourMAC) {
		t.Fatalf("reply frame from %v: %v", f.Source, err)
	}
	_, _, body, ok := parseICMPv6(f.Payload)
	if !ok {
		t.Fatal("reply does not parse")
	}
	m, err := ndp.ParseMessage(body)
	if err != nil {
		t.Fatalf("reply is no NDP message: %v", err)
	}
	na, ok := m.(*ndp.NeighborAdvertisement)
	if !ok || na.TargetAddress != owned {
		t.Fatalf("reply %T claims %v; only %s may be claimed", m, na, owned)
	}
	for _, o := range na.Options {
		if lla, ok := o.(*ndp.LinkLayerAddress); ok && lla.Direction == ndp.Target && !bytes.Equal(lla.Addr, ourMAC) {
			t.Fatalf("reply names %s as the owner's MAC, want %s", lla.Addr, ourMAC)
		}
	}
}

func BenchmarkHandleARP(b *testing.B) {
	frame := arpRequest(b, clientMAC, client4, vip4, nil)
	owns := ownsOnly(vip4)
	for b.Loop() {
		if _, v := HandleARP(frame, ourMAC, owns); v != Answer {
			b.Fatal(v)
		}
	}
}

func BenchmarkHandleNDP(b *testing.B) {
	g6, gmac := snm(b, vip6)
	frame := nsFrame(clientMAC, client6, g6, vip6, gmac, true)
	owns := ownsOnly(vip6)
	for b.Loop() {
		if _, v := HandleNDP(frame, ourMAC, owns); v != Answer {
			b.Fatal(v)
		}
	}
}
