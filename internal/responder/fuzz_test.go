package responder

import (
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
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
			if _, v2 := HandleARP(reply, ourMAC, ownsOnly(vip4)); v2 != Ignored {
				t.Fatalf("our own reply was not ignored: %v", v2)
			}
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
		if v == Answer {
			if _, _, _, ok := parseICMPv6(reply[14:]); !ok {
				t.Fatal("reply does not parse back")
			}
			if _, v2 := HandleNDP(reply, ourMAC, ownsOnly(vip6)); v2 != Ignored {
				t.Fatalf("our own reply was not ignored: %v", v2)
			}
		}
	})
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
