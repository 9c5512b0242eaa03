package responder

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
)

var peerMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}

// A claimed address is answered with the claimed MAC in the ARP sender /
// NA target link-layer address, from the interface's own Ethernet address.
func TestClaimedReplies(t *testing.T) {
	claims := func(a netip.Addr) (net.HardwareAddr, bool) { return peerMAC, a == vip4 || a == vip6 }
	reply, v := HandleARPClaims(arpRequest(t, clientMAC, client4, vip4, nil), ourMAC, claims)
	if v != Answer {
		t.Fatalf("ARP verdict %v", v)
	}
	var f ethernet.Frame
	var p arp.Packet
	if err := f.UnmarshalBinary(reply); err != nil {
		t.Fatal(err)
	}
	if err := p.UnmarshalBinary(f.Payload); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(p.SenderHardwareAddr, peerMAC) || !bytes.Equal(f.Source, ourMAC) || p.SenderIP != vip4 {
		t.Fatalf("ARP reply from %s claims %s for %s, want from %s claiming %s", f.Source, p.SenderHardwareAddr, p.SenderIP, ourMAC, peerMAC)
	}
	snm, _ := ndp.SolicitedNodeMulticast(vip6)
	nr, v := HandleNDPClaims(nsFrame(clientMAC, client6, snm, vip6, multicastMAC(snm), true), ourMAC, claims)
	if v != Answer {
		t.Fatalf("NDP verdict %v", v)
	}
	if ef, _, _, _ := parseNANaming(t, nr, peerMAC); !bytes.Equal(ef.Source, ourMAC) {
		t.Fatalf("NA from %s, want from %s (naming %s)", ef.Source, ourMAC, peerMAC)
	}
}

// The Manager: Update with a Claim answers an owned address with the
// claimed MAC and announces nothing; an update back without one answers
// with the interface's MAC again; an address added with a Claim is not
// announced; removing a claimed address forgets the claim.
func TestManagerClaims(t *testing.T) {
	h := startManager(t, 0)
	h.m.Apply(map[int][]netip.Addr{1: {vip4}})
	eventually(t, "link open", func() bool { return h.net.link(1) != nil })
	l := h.net.link(1)
	arpc := conn(l.ARP)
	eventually(t, "first announcement", func() bool { return len(arpc.written()) == 2 })
	sha := func() net.HardwareAddr {
		t.Helper()
		n := len(arpc.written())
		arpc.in <- arpRequest(t, clientMAC, client4, vip4, nil)
		eventually(t, "a reply", func() bool { return len(arpc.written()) > n })
		var f ethernet.Frame
		var p arp.Packet
		_ = f.UnmarshalBinary(arpc.written()[n])
		_ = p.UnmarshalBinary(f.Payload)
		return p.SenderHardwareAddr
	}
	h.m.Update([]Change{{IfIndex: 1, Addr: vip4, On: true, Claim: peerMAC}})
	eventually(t, "the claim", func() bool { return bytes.Equal(sha(), peerMAC) })
	h.m.Update([]Change{{IfIndex: 1, Addr: vip4, On: true}})
	eventually(t, "the own MAC again", func() bool { return bytes.Equal(sha(), l.MAC) })

	h.m.Update([]Change{{IfIndex: 1, Addr: other4, On: true, Claim: peerMAC}})
	h.m.Update([]Change{{IfIndex: 1, Addr: vip4, On: true, Claim: peerMAC}})
	eventually(t, "the claim", func() bool { return bytes.Equal(sha(), peerMAC) })
	h.m.Update([]Change{{IfIndex: 1, Addr: vip4}})
	eventually(t, "vip4 released", func() bool { // updates coalesce
		arpc.in <- arpRequest(t, clientMAC, client4, vip4, nil)
		time.Sleep(2 * time.Millisecond)
		return value(h.m.met.requests.WithLabelValues(familyIPv4, l.Name, "false")) > 0
	})
	h.m.Update([]Change{{IfIndex: 1, Addr: vip4, On: true}})
	eventually(t, "vip4 back with the own MAC", func() bool { return bytes.Equal(sha(), l.MAC) })
	time.Sleep(20 * time.Millisecond)
	announced := 0
	for _, b := range arpc.written() {
		var f ethernet.Frame
		var p arp.Packet
		if f.UnmarshalBinary(b) == nil && p.UnmarshalBinary(f.Payload) == nil && p.SenderIP == p.TargetIP {
			announced++
			if p.SenderIP == other4 || !bytes.Equal(p.SenderHardwareAddr, l.MAC) {
				t.Errorf("announced %s as %s: a claimed address is never announced", p.SenderIP, p.SenderHardwareAddr)
			}
		}
	}
	if announced != 4 { // vip4 at first, and again when it came back
		t.Errorf("%d gratuitous frames, want 4 (two rounds for vip4)", announced)
	}
}
