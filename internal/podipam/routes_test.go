package podipam

import (
	"fmt"
	"net/netip"
	"testing"
)

func TestDirectRoutes(t *testing.T) {
	a := netip.MustParseAddr
	nodes := []NodeBlocks{
		{Name: "n1", Addrs: []netip.Addr{a("192.0.2.1"), a("2001:db8::1")}, Blocks: pfxs("10.244.0.0/24", "fd00::/120")},
		{Name: "n2", Addrs: []netip.Addr{a("2001:db8::2"), a("192.0.2.2")}, Blocks: pfxs("10.244.1.0/24", "fd00::100/120", "10.250.0.0/26")},
		{Name: "n3", Addrs: []netip.Addr{a("192.0.2.3")}, Blocks: pfxs("10.244.2.0/24", "fd00::200/120")}, // no IPv6 address
	}
	got := fmt.Sprint(DirectRoutes("n1", nodes))
	want := "[{10.244.1.0/24 192.0.2.2} {10.244.2.0/24 192.0.2.3} {10.250.0.0/26 192.0.2.2} {fd00::100/120 2001:db8::2}]"
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
	if r := DirectRoutes("n1", nodes[:1]); len(r) != 0 {
		t.Fatalf("own blocks routed: %v", r)
	}
}
