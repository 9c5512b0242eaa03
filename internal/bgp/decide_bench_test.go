package bgp

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

// BenchmarkDecide10k is one node's whole decision at 10,000 dual-stack
// Services (a tenth with externalTrafficPolicy: Local), 3 advertisements
// and 2 peers: what the agent recomputes on every change.
func BenchmarkDecide10k(b *testing.B) {
	in := Input{Local: "node-1"}
	for i := range 50 {
		in.Nodes = append(in.Nodes, Node{Name: fmt.Sprintf("node-%d", i), Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), netip.MustParseAddr(fmt.Sprintf("fd00::%x", i+1))}})
	}
	in.Pools = []Pool{{Name: "v4", Ranges: []ipalloc.Range{ipalloc.PrefixRange(netip.MustParsePrefix("10.100.0.0/16"))}},
		{Name: "v6", Ranges: []ipalloc.Range{ipalloc.PrefixRange(netip.MustParsePrefix("2001:db8::/64"))}}}
	in.Peers = []Peer{{Name: "tor-a", MyASN: 64512, PeerASN: 64500, Address: netip.MustParseAddr("10.0.0.254"), Families: []Family{IPv4, IPv6}},
		{Name: "tor-b", MyASN: 64512, PeerASN: 64501, Address: netip.MustParseAddr("10.0.0.253"), Families: []Family{IPv4, IPv6}}}
	in.Advertisements = []Advertisement{{Name: "all", LoadBalancerIPs: true, Communities: []string{"65000:1"}},
		{Name: "web", LoadBalancerIPs: true, ServiceSelectors: []*announce.Selector{{MatchLabels: map[string]string{"app": "web"}}}, LocalPref: new(uint32)},
		{Name: "agg", LoadBalancerIPs: true, Pools: []string{"v4"}, AggregationLength: ptr(24), Peers: []string{"tor-b"}}}
	for i := range 10000 {
		s := announce.Service{Key: announce.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)},
			IngressIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)}), netip.MustParseAddr(fmt.Sprintf("2001:db8::%x", i+1))}}
		if i%10 == 0 {
			s.LocalTraffic, s.ReadyNodes = true, []string{"node-1", "node-7"}
		}
		if i%3 == 0 {
			s.Labels = map[string]string{"app": "web"}
		}
		in.Services = append(in.Services, &s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		r := Decide(in)
		if len(r.Nodes) != 1 || len(r.Nodes[0].Sessions[0].Routes) < 19000 {
			b.Fatalf("unexpected result: %d routes", len(r.Nodes[0].Sessions[0].Routes))
		}
	}
}

// BenchmarkDecide10kV4 is the lab bench's shape: 10,000 IPv4-only
// Services, one advertisement, one peer.
func BenchmarkDecide10kV4(b *testing.B) {
	in := Input{Local: "node-1", Nodes: []Node{{Name: "node-1", Addresses: []netip.Addr{netip.MustParseAddr("10.0.0.1")}}},
		Pools:          []Pool{{Name: "v4", Ranges: []ipalloc.Range{ipalloc.PrefixRange(netip.MustParsePrefix("10.100.0.0/16"))}}},
		Peers:          []Peer{{Name: "tor", MyASN: 64512, PeerASN: 64500, Address: netip.MustParseAddr("10.0.0.254"), Families: []Family{IPv4}}},
		Advertisements: []Advertisement{{Name: "all", LoadBalancerIPs: true}}}
	for i := range 10000 {
		in.Services = append(in.Services, &announce.Service{Key: announce.ServiceKey{Namespace: "ns", Name: fmt.Sprintf("svc-%d", i)},
			IngressIPs: []netip.Addr{netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)})}})
	}
	b.ReportAllocs()
	for b.Loop() {
		if r := Decide(in); len(r.Nodes) != 1 || len(r.Nodes[0].Sessions[0].Routes) != 10000 {
			b.Fatalf("unexpected result: %+v", r.Nodes)
		}
	}
}
