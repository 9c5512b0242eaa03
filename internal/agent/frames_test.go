package agent

import (
	"bytes"
	"net"
	"net/netip"
	"testing"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
)

var (
	ourMAC   = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0b}
	theirMAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x0c}
)

func arpReply(t testing.TB, from net.HardwareAddr, ip netip.Addr) []byte {
	p, err := arp.NewPacket(arp.OperationReply, from, ip, ourMAC, netip.MustParseAddr("10.213.0.11"))
	if err != nil {
		t.Fatal(err)
	}
	pb, _ := p.MarshalBinary()
	b, _, err := frame(ourMAC, from, ethernet.EtherTypeARP, pb)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestParseClaim(t *testing.T) {
	vip := netip.MustParseAddr("10.213.0.100")
	addr, mac, ok := parseClaim(arpReply(t, theirMAC, vip), ourMAC)
	if !ok || addr != vip || !bytes.Equal(mac, theirMAC) {
		t.Fatalf("ARP reply: %v %v %v", addr, mac, ok)
	}
	if _, _, ok := parseClaim(arpReply(t, ourMAC, vip), ourMAC); ok {
		t.Fatal("our own reply counted as a claim")
	}
	// Our own request is not a claim either.
	req, _, err := probeRequest(theirMAC, netip.MustParseAddr("10.213.0.12"), vip)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, ok := parseClaim(req, ourMAC); ok {
		t.Fatal("an ARP request counted as a claim")
	}
	// An IPv6 solicitation parses as a frame but claims nothing.
	ns, dst, err := probeRequest(ourMAC, netip.MustParseAddr("fd00:213::b"), netip.MustParseAddr("fd00:213::64"))
	if err != nil || dst.String() != "33:33:ff:00:00:64" {
		t.Fatalf("NS to %v: %v", dst, err)
	}
	if _, _, ok := parseClaim(ns, theirMAC); ok {
		t.Fatal("a solicitation counted as a claim")
	}
}

func FuzzParseClaim(f *testing.F) {
	f.Add(arpReply(f, theirMAC, netip.MustParseAddr("10.213.0.100")))
	ns, _, _ := probeRequest(ourMAC, netip.MustParseAddr("fd00:213::b"), netip.MustParseAddr("fd00:213::64"))
	f.Add(ns)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		addr, mac, ok := parseClaim(b, ourMAC)
		if ok && (!addr.IsValid() || len(mac) != 6 || bytes.Equal(mac, ourMAC)) {
			t.Fatalf("claim %v %v", addr, mac)
		}
	})
}
