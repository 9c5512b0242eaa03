package bgp

import (
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

// byteSource hands out small numbers from fuzz input, zero when it runs out.
type byteSource struct {
	b []byte
	i int
}

func (s *byteSource) n(mod int) int {
	if s.i >= len(s.b) || mod <= 0 {
		return 0
	}
	v := int(s.b[s.i]) % mod
	s.i++
	return v
}

var (
	fuzzAddrs = []string{"192.0.2.1", "192.0.2.2", "192.0.2.130", "198.51.100.1", "203.0.113.9", "2001:db8::1", "2001:db8::2", "2001:db8:1::1", "127.0.0.1"}
	fuzzPools = []Pool{
		cidrPool("p4", map[string]string{"bgp": "yes"}, "192.0.2.0/24"),
		cidrPool("p6", nil, "2001:db8::/64"),
		{Name: "r", Ranges: []ipalloc.Range{{First: addr("198.51.100.0"), Last: addr("198.51.100.3")}}},
	}
)

// fuzzInput builds a small world from bytes: every choice is an index
// into fixed tables so that most inputs are meaningful.
func fuzzInput(data []byte) Input {
	s := &byteSource{b: data}
	labels := func() map[string]string {
		return map[string]string{"rack": []string{"a", "b", "c"}[s.n(3)]}
	}
	var in Input
	in.Pools = fuzzPools
	for i := range 1 + s.n(4) {
		n := node(fmt.Sprintf("node-%d", i), labels(), "10.0.0."+fmt.Sprint(i+1))
		if s.n(2) == 1 {
			n.Addresses = append(n.Addresses, addr(fmt.Sprintf("fd00::%d", i+1)))
		}
		if s.n(5) == 0 {
			n.Labels[LabelExcludeFromLB] = ""
		}
		in.Nodes = append(in.Nodes, n)
	}
	for i := range s.n(4) {
		p := Peer{Name: fmt.Sprintf("peer-%d", i), MyASN: 64512, PeerASN: uint32(64500 + s.n(2)*12), Address: addr([]string{"10.0.0.254", "10.0.0.253", "fd00::fe"}[s.n(3)])}
		if s.n(2) == 1 {
			p.NodeSelectors = []*announce.Selector{sel("rack", []string{"a", "b"}[s.n(2)])}
		}
		p.Families = [][]Family{nil, {IPv4, IPv6}, {IPv6}}[s.n(3)]
		if s.n(3) == 0 {
			p.RouterID = addr(fmt.Sprintf("10.9.9.%d", s.n(2)))
		}
		p.HoldTime = []*time.Duration{nil, ptr(30 * time.Second), ptr(2 * time.Second)}[s.n(3)]
		p.MaxReceived = []*uint32{nil, ptr(uint32(0)), ptr(uint32(MaxMaxReceived + 1))}[s.n(3)]
		in.Peers = append(in.Peers, p)
	}
	for i := range s.n(4) {
		a := Advertisement{Name: fmt.Sprintf("adv-%d", i), LoadBalancerIPs: s.n(4) != 0, ExternalIPs: s.n(2) == 1}
		a.AggregationLength = []*int{nil, ptr(24), ptr(30), ptr(16)}[s.n(4)]
		a.AggregationLengthV6 = []*int{nil, ptr(64), ptr(120)}[s.n(3)]
		a.Pools = [][]string{nil, {"p4"}, {"p6", "r"}}[s.n(3)]
		if s.n(3) == 0 {
			a.PoolSelectors = []*announce.Selector{sel("bgp", "yes")}
		}
		if s.n(2) == 1 {
			a.NodeSelectors = []*announce.Selector{sel("rack", []string{"a", "c"}[s.n(2)])}
		}
		a.Peers = [][]string{nil, {"peer-0"}, {"peer-1", "peer-9"}}[s.n(3)]
		a.Communities = [][]string{nil, {"1:1"}, {"alias"}, {"large:1:2:3", "1:2"}}[s.n(4)]
		a.LocalPref = []*uint32{nil, ptr(uint32(100)), ptr(uint32(200))}[s.n(3)]
		in.Advertisements = append(in.Advertisements, a)
	}
	in.Communities = [][]CommunityAlias{nil, {{Object: "c", Name: "alias", Value: "9:9"}}}[s.n(2)]
	for i := range s.n(8) {
		sv := svc(fmt.Sprintf("svc-%d", i), fuzzAddrs[s.n(len(fuzzAddrs))])
		if s.n(2) == 1 {
			sv.IngressIPs = append(sv.IngressIPs, addr(fuzzAddrs[s.n(len(fuzzAddrs))]))
		}
		if s.n(3) == 0 {
			sv.ExternalIPs = []netip.Addr{addr(fuzzAddrs[s.n(len(fuzzAddrs))])}
		}
		if s.n(2) == 1 {
			sv.LocalTraffic = true
			for _, n := range in.Nodes {
				if s.n(2) == 1 {
					sv.ReadyNodes = append(sv.ReadyNodes, n.Name)
				}
			}
		}
		in.Services = append(in.Services, sv)
	}
	return in
}

// oracle computes the expected (node/peer -> prefixes) the slow, obvious
// way, from the sessions Decide resolved.
func oracle(in Input, r Result) map[string][]string {
	_, invalidAdv := invalidObjects(r)
	out := map[string]map[string]bool{}
	for _, nr := range r.Nodes {
		if nr.Excluded {
			continue
		}
		n := in.Nodes[slices.IndexFunc(in.Nodes, func(x Node) bool { return x.Name == nr.Node })]
		for _, s := range nr.Sessions {
			if s.Blocked != "" {
				continue
			}
			for _, a := range in.Advertisements {
				if invalidAdv[a.Name] || (len(a.Peers) > 0 && !slices.Contains(a.Peers, s.Peer)) || !selectsNode(a.NodeSelectors, &n) {
					continue
				}
				for _, sv := range in.Services {
					if sv.LocalTraffic && !slices.Contains(sv.ReadyNodes, n.Name) {
						continue
					}
					for _, p := range oracleAddrs(a, *sv) {
						if s.carries(FamilyOf(p.Addr())) {
							k := nr.Node + "/" + s.Peer
							if out[k] == nil {
								out[k] = map[string]bool{}
							}
							out[k][p.String()] = true
						}
					}
				}
			}
		}
	}
	res := map[string][]string{}
	for k, set := range out {
		for p := range set {
			res[k] = append(res[k], p)
		}
	}
	return res
}

func invalidObjects(r Result) (peers, advs map[string]bool) {
	peers, advs = map[string]bool{}, map[string]bool{}
	for _, p := range r.Problems {
		if p.Invalid && p.Kind == KindPeer {
			peers[p.Object] = true
		}
		if p.Invalid && p.Kind == KindAdvertisement {
			advs[p.Object] = true
		}
	}
	return peers, advs
}

// oracleAddrs: the prefixes a selects of sv, by brute force over pools.
func oracleAddrs(a Advertisement, sv announce.Service) []netip.Prefix {
	var addrs []netip.Addr
	if a.LoadBalancerIPs {
		addrs = append(addrs, sv.IngressIPs...)
	}
	if a.ExternalIPs {
		addrs = append(addrs, sv.ExternalIPs...)
	}
	var out []netip.Prefix
	for _, x := range addrs {
		if x.IsLoopback() {
			continue
		}
		all := len(a.Pools) == 0 && len(a.PoolSelectors) == 0
		in, selected := false, false
		for _, p := range fuzzPools {
			for _, r := range p.Ranges {
				if r.Contains(x) {
					in = true
					selected = selected || all || slices.Contains(a.Pools, p.Name) ||
						slices.ContainsFunc(a.PoolSelectors, func(s *announce.Selector) bool { return s.Matches(p.Labels) })
				}
			}
		}
		switch {
		case !in && all:
			out = append(out, netip.PrefixFrom(x, x.BitLen()))
		case selected:
			bits := 32
			if a.AggregationLength != nil {
				bits = *a.AggregationLength
			}
			if x.Is6() {
				bits = 128
				if a.AggregationLengthV6 != nil {
					bits = *a.AggregationLengthV6
				}
			}
			out = append(out, netip.PrefixFrom(x, bits).Masked())
		}
	}
	return out
}

func FuzzDecide(f *testing.F) {
	f.Add([]byte{3, 1, 0, 1, 1, 2, 1, 0, 0, 1, 1, 0, 1, 0, 1, 2, 3, 1, 0, 5, 1, 2, 3, 4, 5, 6, 7, 8})
	f.Add([]byte{2, 0, 1, 0, 2, 0, 1, 1, 0, 2, 1, 1, 1, 1, 0, 0, 3, 2, 1, 0, 1, 7, 7, 7, 7, 1, 0, 1, 1})
	f.Add([]byte("a fairly long seed that walks every table in the fuzz input builder at least once"))
	f.Fuzz(func(t *testing.T, data []byte) {
		in := fuzzInput(data)
		r := Decide(in)
		checkInvariants(t, in, r)
		got := routesOf(r)
		want := oracle(in, r)
		for k := range want {
			slices.SortFunc(want[k], func(a, b string) int { return comparePrefix(netip.MustParsePrefix(a), netip.MustParsePrefix(b)) })
		}
		if !equalRoutes(got, want) {
			t.Fatalf("routes differ from the oracle\n got %v\nwant %v", got, want)
		}
		// The order of every input list does not matter.
		rev := in
		rev.Nodes, rev.Peers, rev.Advertisements, rev.Services = slices.Clone(in.Nodes), slices.Clone(in.Peers), slices.Clone(in.Advertisements), slices.Clone(in.Services)
		slices.Reverse(rev.Nodes)
		slices.Reverse(rev.Peers)
		slices.Reverse(rev.Advertisements)
		slices.Reverse(rev.Services)
		r2 := Decide(rev)
		for i := range r.Nodes {
			if !equalNode(r.Nodes[i], r2.Nodes[i]) {
				t.Fatalf("input order changed node %s:\n%+v\n%+v", r.Nodes[i].Node, r.Nodes[i], r2.Nodes[i])
			}
		}
		// Deciding for one node gives that node's part of the whole.
		for _, n := range r.Nodes {
			one := in
			one.Local = n.Node
			if got := Decide(one); len(got.Nodes) != 1 || !equalNode(got.Nodes[0], n) {
				t.Fatalf("Local=%s differs from the whole decision", n.Node)
			}
		}
	})
}

func checkInvariants(t *testing.T, in Input, r Result) {
	t.Helper()
	for _, n := range r.Nodes {
		if !n.RouterID.Is4() || n.RouterID.IsUnspecified() {
			t.Fatalf("node %s router ID %s", n.Node, n.RouterID)
		}
		for _, s := range n.Sessions {
			if (s.Blocked != "" || n.Excluded) && len(s.Routes) > 0 {
				t.Fatalf("%s/%s blocked or excluded but has routes", n.Node, s.Peer)
			}
			if s.NextHop4.IsValid() && (!s.NextHop4.Is4() || FamilyOf(s.Address) == IPv4) || s.NextHop6.IsValid() && (!s.NextHop6.Is6() || s.NextHop6.Is4In6() || FamilyOf(s.Address) == IPv6) {
				t.Fatalf("%s/%s bad next hops %s %s", n.Node, s.Peer, s.NextHop4, s.NextHop6)
			}
			for i, rt := range s.Routes {
				if i > 0 && comparePrefix(s.Routes[i-1].Prefix, rt.Prefix) >= 0 {
					t.Fatalf("%s/%s routes not sorted and unique: %v", n.Node, s.Peer, s.Routes)
				}
				if !s.carries(FamilyOf(rt.Prefix.Addr())) || rt.Attrs == nil || rt.Prefix != rt.Prefix.Masked() {
					t.Fatalf("%s/%s route %s not carried, unmasked or without attributes", n.Node, s.Peer, rt.Prefix)
				}
			}
		}
	}
}

func FuzzParseCommunity(f *testing.F) {
	for _, s := range []string{"65000:100", "large:1:2:3", "0:0", "65535:65535", "large:4294967295:4294967295:4294967295", ":", "large:", "1:2:3"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		std, large, isLarge, err := ParseCommunity(s)
		if err != nil {
			return
		}
		// What parses prints back to the same text (no other spelling is
		// accepted: no signs, spaces or leading '+').
		var back string
		if isLarge {
			back = fmt.Sprintf("large:%d:%d:%d", large.Global, large.Local1, large.Local2)
		} else {
			back = fmt.Sprintf("%d:%d", std>>16, std&0xffff)
		}
		if std2, large2, isLarge2, err := ParseCommunity(back); err != nil || std2 != std || large2 != large || isLarge2 != isLarge {
			t.Fatalf("%q -> %q does not parse back the same", s, back)
		}
	})
}
