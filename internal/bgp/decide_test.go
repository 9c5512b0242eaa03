package bgp

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

func addr(s string) netip.Addr             { return netip.MustParseAddr(s) }
func pfx(s string) netip.Prefix            { return netip.MustParsePrefix(s) }
func ptr[T any](v T) *T                    { return &v }
func key(ns, n string) announce.ServiceKey { return announce.ServiceKey{Namespace: ns, Name: n} }

func cidrPool(name string, labels map[string]string, cidrs ...string) Pool {
	p := Pool{Name: name, Labels: labels}
	for _, c := range cidrs {
		p.Ranges = append(p.Ranges, ipalloc.PrefixRange(pfx(c)))
	}
	return p
}

func svc(name string, ips ...string) *announce.Service {
	s := &announce.Service{Key: key("default", name)}
	for _, ip := range ips {
		s.IngressIPs = append(s.IngressIPs, addr(ip))
	}
	return s
}

func local(s *announce.Service, ready ...string) *announce.Service {
	c := *s
	c.LocalTraffic, c.ReadyNodes = true, ready
	return &c
}

func node(name string, labels map[string]string, addrs ...string) Node {
	n := Node{Name: name, Labels: labels}
	for _, a := range addrs {
		n.Addresses = append(n.Addresses, addr(a))
	}
	return n
}

func sel(kv ...string) *announce.Selector {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return &announce.Selector{MatchLabels: m}
}

// base is a 3-node dual-stack cluster with one IPv4 router, one
// advertisement of every pool and one dual-stack pool.
func base() Input {
	return Input{
		Nodes: []Node{
			node("node-1", nil, "10.0.0.1", "fd00::1"),
			node("node-2", nil, "10.0.0.2", "fd00::2"),
			node("node-3", nil, "10.0.0.3"),
		},
		Peers:          []Peer{{Name: "tor", MyASN: 64512, PeerASN: 64500, Address: addr("10.0.0.254"), GracefulRestart: true}},
		Advertisements: []Advertisement{{Name: "all", LoadBalancerIPs: true}},
		Pools:          []Pool{cidrPool("default", nil, "192.0.2.0/24", "2001:db8::/64")},
	}
}

// routesOf is "node/peer" -> prefixes, for every open session.
func routesOf(r Result) map[string][]string {
	out := map[string][]string{}
	for _, n := range r.Nodes {
		for _, s := range n.Sessions {
			for _, rt := range s.Routes {
				out[n.Node+"/"+s.Peer] = append(out[n.Node+"/"+s.Peer], rt.Prefix.String())
			}
		}
	}
	return out
}

func TestDecideRoutes(t *testing.T) {
	cases := []struct {
		name string
		mut  func(*Input)
		want map[string][]string
	}{
		{"cluster traffic: every node (ECMP)", func(in *Input) {
			in.Services = []*announce.Service{svc("web", "192.0.2.10")}
		}, map[string][]string{"node-1/tor": {"192.0.2.10/32"}, "node-2/tor": {"192.0.2.10/32"}, "node-3/tor": {"192.0.2.10/32"}}},
		{"local traffic: only nodes with a ready endpoint", func(in *Input) {
			in.Services = []*announce.Service{local(svc("web", "192.0.2.10"), "node-2")}
		}, map[string][]string{"node-2/tor": {"192.0.2.10/32"}}},
		{"local traffic without ready endpoints: nobody", func(in *Input) {
			in.Services = []*announce.Service{local(svc("web", "192.0.2.10"))}
		}, map[string][]string{}},
		{"excluded node advertises nothing", func(in *Input) {
			in.Nodes[0].Labels = map[string]string{LabelExcludeFromLB: ""}
			in.Services = []*announce.Service{svc("web", "192.0.2.10")}
		}, map[string][]string{"node-2/tor": {"192.0.2.10/32"}, "node-3/tor": {"192.0.2.10/32"}}},
		{"advertisement node selector", func(in *Input) {
			in.Nodes[1].Labels = map[string]string{"rack": "a"}
			in.Advertisements[0].NodeSelectors = []*announce.Selector{sel("rack", "a")}
			in.Services = []*announce.Service{svc("web", "192.0.2.10")}
		}, map[string][]string{"node-2/tor": {"192.0.2.10/32"}}},
		{"peer node selector", func(in *Input) {
			in.Nodes[2].Labels = map[string]string{"rack": "b"}
			in.Peers[0].NodeSelectors = []*announce.Selector{sel("rack", "b")}
			in.Services = []*announce.Service{svc("web", "192.0.2.10")}
		}, map[string][]string{"node-3/tor": {"192.0.2.10/32"}}},
		{"advertisement peers", func(in *Input) {
			in.Peers = append(in.Peers, Peer{Name: "tor-b", MyASN: 64512, PeerASN: 64501, Address: addr("10.0.0.253")})
			in.Advertisements[0].Peers = []string{"tor-b"}
			in.Nodes = in.Nodes[:1]
			in.Services = []*announce.Service{svc("web", "192.0.2.10")}
		}, map[string][]string{"node-1/tor-b": {"192.0.2.10/32"}}},
		{"v6 over a v4 session needs the node's global v6 (node-3 has none)", func(in *Input) {
			in.Peers[0].Families = []Family{IPv4, IPv6}
			in.Services = []*announce.Service{svc("web", "192.0.2.10", "2001:db8::10")}
		}, map[string][]string{
			"node-1/tor": {"192.0.2.10/32", "2001:db8::10/128"}, "node-2/tor": {"192.0.2.10/32", "2001:db8::10/128"},
			"node-3/tor": {"192.0.2.10/32"}}},
		{"v4 session without v6 family: no v6 prefix", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Services = []*announce.Service{svc("web", "192.0.2.10", "2001:db8::10")}
		}, map[string][]string{"node-1/tor": {"192.0.2.10/32"}}},
		{"aggregation: one /24 for two Services", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Advertisements[0].AggregationLength = ptr(24)
			in.Services = []*announce.Service{svc("a", "192.0.2.10"), svc("b", "192.0.2.20")}
		}, map[string][]string{"node-1/tor": {"192.0.2.0/24"}}},
		{"aggregate stays while one member is left", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Advertisements[0].AggregationLength = ptr(24)
			in.Services = []*announce.Service{svc("b", "192.0.2.20")}
		}, map[string][]string{"node-1/tor": {"192.0.2.0/24"}}},
		{"aggregate of eTP Local members: nodes with a ready member", func(in *Input) {
			in.Advertisements[0].AggregationLength = ptr(24)
			in.Services = []*announce.Service{local(svc("a", "192.0.2.10"), "node-1"), local(svc("b", "192.0.2.20"), "node-3")}
		}, map[string][]string{"node-1/tor": {"192.0.2.0/24"}, "node-3/tor": {"192.0.2.0/24"}}},
		{"pool by name; address outside every pool only without a pool filter", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Pools = append(in.Pools, cidrPool("other", nil, "198.51.100.0/24"))
			in.Advertisements = []Advertisement{
				{Name: "named", LoadBalancerIPs: true, Pools: []string{"other"}, Communities: []string{"1:1"}},
			}
			in.Services = []*announce.Service{svc("a", "192.0.2.10"), svc("b", "198.51.100.7"), svc("c", "203.0.113.1")}
		}, map[string][]string{"node-1/tor": {"198.51.100.7/32"}}},
		{"address outside every pool is never aggregated", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Advertisements[0].AggregationLength = ptr(24)
			in.Services = []*announce.Service{svc("c", "203.0.113.1")}
		}, map[string][]string{"node-1/tor": {"203.0.113.1/32"}}},
		{"pool selector", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Pools = append(in.Pools, cidrPool("other", map[string]string{"bgp": "yes"}, "198.51.100.0/24"))
			in.Advertisements[0].PoolSelectors = []*announce.Selector{sel("bgp", "yes")}
			in.Services = []*announce.Service{svc("a", "192.0.2.10"), svc("b", "198.51.100.7")}
		}, map[string][]string{"node-1/tor": {"198.51.100.7/32"}}},
		{"service selector with a virtual label; namespace selector", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Namespaces = map[string]map[string]string{"team-a": {"team": "a"}}
			in.Advertisements = []Advertisement{
				{Name: "by-name", LoadBalancerIPs: true, ServiceSelectors: []*announce.Selector{sel(announce.LabelServiceName, "a")}},
				{Name: "by-ns", LoadBalancerIPs: true, NamespaceSelectors: []*announce.Selector{sel("team", "a")}},
			}
			b := svc("b", "192.0.2.20")
			b.Key.Namespace = "team-a"
			in.Services = []*announce.Service{svc("a", "192.0.2.10"), b, svc("c", "192.0.2.30")}
		}, map[string][]string{"node-1/tor": {"192.0.2.10/32", "192.0.2.20/32"}}},
		{"external IPs only when asked", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			s := svc("a", "192.0.2.10")
			s.ExternalIPs = []netip.Addr{addr("203.0.113.5")}
			in.Services = []*announce.Service{s}
			in.Advertisements = append(in.Advertisements, Advertisement{Name: "ext", ExternalIPs: true})
		}, map[string][]string{"node-1/tor": {"192.0.2.10/32", "203.0.113.5/32"}}},
		{"unusable addresses are dropped", func(in *Input) {
			in.Nodes = in.Nodes[:1]
			in.Services = []*announce.Service{svc("a", "0.0.0.0", "127.0.0.1", "fe80::1", "224.0.0.1")}
		}, map[string][]string{}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			tc.mut(&in)
			got := routesOf(Decide(in))
			if !equalRoutes(got, tc.want) {
				t.Fatalf("routes\n got %v\nwant %v", got, tc.want)
			}
		})
	}
}

func equalRoutes(a, b map[string][]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

func TestDecideAttributes(t *testing.T) {
	in := base()
	in.Nodes = in.Nodes[:1]
	in.Communities = []CommunityAlias{{Object: "c", Name: "no-export", Value: "65535:65281"}, {Object: "c", Name: "big", Value: "large:1:2:3"}}
	in.Advertisements = []Advertisement{
		{Name: "a", LoadBalancerIPs: true, Communities: []string{"no-export", "65000:1"}, LocalPref: ptr(uint32(100))},
		{Name: "b", LoadBalancerIPs: true, Communities: []string{"big", "65000:1"}, LocalPref: ptr(uint32(200)), ServiceSelectors: []*announce.Selector{sel(announce.LabelServiceName, "web")}},
	}
	in.Services = []*announce.Service{svc("web", "192.0.2.10"), svc("db", "192.0.2.11")}
	r := Decide(in)
	if len(r.Problems) != 0 {
		t.Fatalf("problems: %+v", r.Problems)
	}
	routes := r.Nodes[0].Sessions[0].Routes
	if len(routes) != 2 {
		t.Fatalf("routes %+v", routes)
	}
	db, web := routes[1].Attrs, routes[0].Attrs
	if routes[0].Prefix != pfx("192.0.2.10/32") {
		t.Fatalf("order: %+v", routes)
	}
	if want := []uint32{65000<<16 | 1, 0xffffff01}; !slices.Equal(db.Communities, want) || len(db.Large) != 0 || db.LocalPref != 100 {
		t.Fatalf("db attrs %+v", db)
	}
	if !slices.Equal(web.Communities, []uint32{65000<<16 | 1, 0xffffff01}) || !slices.Equal(web.Large, []LargeCommunity{{1, 2, 3}}) ||
		!web.HasLocalPref || web.LocalPref != 200 {
		t.Fatalf("merged web attrs %+v: want communities united, large kept, the highest LOCAL_PREF", web)
	}
}

func TestDecideSessions(t *testing.T) {
	in := base()
	in.Nodes = append(in.Nodes, node("v6only", nil, "fd00::9"))
	in.Peers = []Peer{
		{Name: "a", MyASN: 64512, PeerASN: 64500, Address: addr("10.0.0.254"), RouterID: addr("10.9.9.9"), BFDProfile: "fast"},
		{Name: "b", MyASN: 64513, Address: addr("10.0.0.253"), RouterID: addr("10.8.8.8")},
		{Name: "c", MyASN: 64512, Dynamic: DynamicExternal, Address: addr("10.0.0.254"), HoldTime: ptr(4 * time.Second), BFDProfile: "missing"},
		{Name: "d", MyASN: 64512, PeerASN: 64500, Address: addr("fd00::fe"), HoldTime: ptr(30 * time.Second), ConnectTime: ptr(time.Second), MaxReceived: ptr(uint32(0))},
	}
	in.BFDProfiles = []BFDProfile{{Name: "fast", ReceiveInterval: 50 * time.Millisecond}}
	r := Decide(in)
	n1, _ := r.Node("node-1")
	if n1.RouterID != addr("10.9.9.9") || n1.ASN != 64512 || len(n1.Sessions) != 4 {
		t.Fatalf("node-1 %+v", n1)
	}
	a, b, c, d := n1.Sessions[0], n1.Sessions[1], n1.Sessions[2], n1.Sessions[3]
	if a.Blocked != "" || a.HoldTime != 9*time.Second || a.KeepaliveTime != 3*time.Second || a.ConnectTime != 5*time.Second || a.Port != 179 || a.MaxReceived != DefaultMaxReceived ||
		a.BFD == nil || a.BFD.ReceiveInterval != 50*time.Millisecond || a.BFD.TransmitInterval != 300*time.Millisecond || a.BFD.DetectMultiplier != 3 {
		t.Fatalf("a: defaults and BFD %+v %+v", a, a.BFD)
	}
	if !strings.Contains(b.Blocked, "routerID 10.8.8.8 differs from 10.9.9.9") {
		t.Fatalf("b: want a router ID conflict, got %q", b.Blocked)
	}
	if !strings.Contains(c.Blocked, "already peers with 10.0.0.254") {
		t.Fatalf("c: want a duplicate address, got %q", c.Blocked)
	}
	if d.Blocked != "" || d.HoldTime != 30*time.Second || d.KeepaliveTime != 10*time.Second || d.ConnectTime != time.Second || !slices.Equal(d.Families, []Family{IPv6}) || d.MaxReceived != 0 {
		t.Fatalf("d %+v", d)
	}
	n3, _ := r.Node("node-3")
	if n3.RouterID != addr("10.9.9.9") {
		t.Fatalf("node-3 router ID %s", n3.RouterID)
	}
	in.Peers = in.Peers[2:3]
	r = Decide(in)
	n1, _ = r.Node("node-1")
	if s := n1.Sessions[0]; s.HoldTime != 4*time.Second || s.KeepaliveTime != time.Second || s.BFD != nil || len(s.Warnings) != 1 || s.Blocked != "" || n1.RouterID != addr("10.0.0.1") {
		t.Fatalf("keepalive a third of hold / missing BFD profile / default router ID: %+v (router ID %s)", s, n1.RouterID)
	}
	v6, _ := r.Node("v6only")
	if !v6.RouterID.Is4() || v6.RouterID == n1.RouterID || v6.RouterID.IsUnspecified() {
		t.Fatalf("v6-only node router ID %s: want a stable hash of its name", v6.RouterID)
	}
	if !hasProblem(r, KindPeer, "c", "spec.bfdProfile", false) {
		t.Fatalf("missing BFD profile is not reported: %+v", r.Problems)
	}
}

func hasProblem(r Result, k Kind, obj, field string, invalid bool) bool {
	return slices.ContainsFunc(r.Problems, func(p Problem) bool {
		return p.Kind == k && p.Object == obj && p.Field == field && p.Invalid == invalid
	})
}

func TestDecideProblems(t *testing.T) {
	bad := &announce.Selector{MatchExpressions: []announce.Requirement{{Key: "x", Operator: "Near"}}}
	cases := []struct {
		name          string
		mut           func(*Input)
		kind          Kind
		obj, field    string
		invalid       bool
		advertiseNone bool
	}{
		{"unknown alias", func(in *Input) { in.Advertisements[0].Communities = []string{"1:1", "nope"} }, KindAdvertisement, "all", "spec.communities[1]", true, true},
		{"duplicate alias", func(in *Input) {
			in.Communities = []CommunityAlias{{Object: "x", Name: "n", Value: "1:1"}, {Object: "y", Name: "n", Value: "1:2"}}
			in.Advertisements[0].Communities = []string{"n"}
		}, KindAdvertisement, "all", "spec.communities[0]", true, true},
		{"bad literal community", func(in *Input) { in.Advertisements[0].Communities = []string{"70000:1"} }, KindAdvertisement, "all", "spec.communities[0]", true, true},
		{"aggregation shorter than a pool block", func(in *Input) {
			in.Pools = []Pool{cidrPool("small", nil, "192.0.2.0/25")}
			in.Advertisements[0].AggregationLength = ptr(24)
		}, KindAdvertisement, "all", "spec.aggregationLength", true, true},
		{"v6 aggregation vs an unaligned range", func(in *Input) {
			in.Pools = []Pool{{Name: "r", Ranges: []ipalloc.Range{{First: addr("2001:db8::10"), Last: addr("2001:db8::1f")}}}}
			in.Advertisements[0].AggregationLengthV6 = ptr(120)
		}, KindAdvertisement, "all", "spec.aggregationLengthV6", true, true},
		{"bad advertisement selector", func(in *Input) { in.Advertisements[0].ServiceSelectors = []*announce.Selector{bad} }, KindAdvertisement, "all", "spec.serviceSelectors[0]", true, true},
		{"unknown peer name", func(in *Input) { in.Advertisements[0].Peers = []string{"tor", "gone"} }, KindAdvertisement, "all", "spec.peers[1]", false, false},
		{"bad peer selector", func(in *Input) { in.Peers[0].NodeSelectors = []*announce.Selector{bad} }, KindPeer, "tor", "spec.nodeSelectors[0]", true, true},
		{"keepalive not below hold", func(in *Input) { in.Peers[0].KeepaliveTime = ptr(9 * time.Second) }, KindPeer, "tor", "spec.keepaliveTime", true, true},
		{"hold 2s", func(in *Input) { in.Peers[0].HoldTime = ptr(2 * time.Second) }, KindPeer, "tor", "spec.holdTime", true, true},
		{"loopback peer", func(in *Input) { in.Peers[0].Address = addr("127.0.0.1") }, KindPeer, "tor", "spec.peerAddress", true, true},
		{"asn and dynamic", func(in *Input) { in.Peers[0].Dynamic = DynamicInternal }, KindPeer, "tor", "spec.dynamicASN", true, true},
		{"received limit over the maximum", func(in *Input) { in.Peers[0].MaxReceived = ptr(uint32(MaxMaxReceived + 1)) }, KindPeer, "tor", "spec.maxReceivedPrefixes", true, true},
		{"bad alias value", func(in *Input) { in.Communities = []CommunityAlias{{Object: "x", Name: "n", Value: "1"}} }, KindCommunity, "x", "spec.communities", false, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := base()
			in.Services = []*announce.Service{svc("web", "192.0.2.10")}
			tc.mut(&in)
			r := Decide(in)
			if !hasProblem(r, tc.kind, tc.obj, tc.field, tc.invalid) {
				t.Fatalf("want %s %s %s (invalid %v), got %+v", tc.kind, tc.obj, tc.field, tc.invalid, r.Problems)
			}
			if got := len(routesOf(r)) == 0; got != tc.advertiseNone {
				t.Fatalf("advertises nothing = %v, want %v: %v", got, tc.advertiseNone, routesOf(r))
			}
		})
	}
}

func TestDecideLocalEqualsAll(t *testing.T) {
	in := base()
	in.Peers[0].Families = []Family{IPv4, IPv6}
	in.Services = []*announce.Service{svc("a", "192.0.2.10", "2001:db8::10"), local(svc("b", "192.0.2.11"), "node-3")}
	all := Decide(in)
	for _, n := range in.Nodes {
		in.Local = n.Name
		one := Decide(in)
		want, _ := all.Node(n.Name)
		if len(one.Nodes) != 1 || !equalNode(one.Nodes[0], want) {
			t.Fatalf("Local=%s: %+v, want %+v", n.Name, one.Nodes, want)
		}
	}
}

func equalNode(a, b NodeResult) bool {
	if a.Node != b.Node || a.RouterID != b.RouterID || a.ASN != b.ASN || a.Excluded != b.Excluded || len(a.Sessions) != len(b.Sessions) {
		return false
	}
	for i := range a.Sessions {
		x, y := a.Sessions[i], b.Sessions[i]
		if x.Peer != y.Peer || x.Blocked != y.Blocked || x.NextHop4 != y.NextHop4 || x.NextHop6 != y.NextHop6 || len(x.Routes) != len(y.Routes) {
			return false
		}
		for j := range x.Routes {
			if x.Routes[j].Prefix != y.Routes[j].Prefix || x.Routes[j].Attrs.Key() != y.Routes[j].Attrs.Key() {
				return false
			}
		}
	}
	return true
}

func TestParseCommunity(t *testing.T) {
	for _, tc := range []struct {
		in    string
		std   uint32
		large LargeCommunity
		isL   bool
		ok    bool
	}{
		{"65535:65281", 0xffffff01, LargeCommunity{}, false, true},
		{"0:0", 0, LargeCommunity{}, false, true},
		{"large:4294967295:0:1", 0, LargeCommunity{4294967295, 0, 1}, true, true},
		{"65536:1", 0, LargeCommunity{}, false, false},
		{"1:-1", 0, LargeCommunity{}, false, false},
		{"+1:1", 0, LargeCommunity{}, false, false},
		{"large:1:2", 0, LargeCommunity{}, false, false},
		{"large:1:2:4294967296", 0, LargeCommunity{}, false, false},
		{"1", 0, LargeCommunity{}, false, false},
		{"", 0, LargeCommunity{}, false, false},
	} {
		std, large, isL, err := ParseCommunity(tc.in)
		if (err == nil) != tc.ok || (tc.ok && (std != tc.std || large != tc.large || isL != tc.isL)) {
			t.Errorf("ParseCommunity(%q) = %x %v %v %v", tc.in, std, large, isL, err)
		}
	}
}

func TestMinAggregation(t *testing.T) {
	for _, tc := range []struct {
		first, last string
		want        int
	}{
		{"192.0.2.0", "192.0.2.255", 24},
		{"192.0.2.0", "192.0.2.127", 25},
		{"192.0.2.10", "192.0.2.20", 32},
		{"192.0.2.8", "192.0.2.15", 29},
		{"0.0.0.0", "255.255.255.255", 0},
		{"2001:db8::", "2001:db8::ffff", 112},
	} {
		if got := minAggregation(ipalloc.Range{First: addr(tc.first), Last: addr(tc.last)}); got != tc.want {
			t.Errorf("minAggregation(%s-%s) = %d, want %d", tc.first, tc.last, got, tc.want)
		}
	}
}

func TestAdvertisedPools(t *testing.T) {
	in := base()
	in.Pools = append(in.Pools, cidrPool("edge", map[string]string{"tier": "edge"}, "198.51.100.0/24"),
		cidrPool("l2", nil, "203.0.113.0/24"))
	for name, tc := range map[string]struct {
		advs []Advertisement
		want []string
	}{
		"none":                              {nil, nil},
		"every pool":                        {[]Advertisement{{Name: "all"}}, []string{"default", "edge", "l2"}},
		"by name and selector":              {[]Advertisement{{Name: "a", Pools: []string{"default"}}, {Name: "b", PoolSelectors: []*announce.Selector{sel("tier", "edge")}}}, []string{"default", "edge"}},
		"an invalid one counts for nothing": {[]Advertisement{{Name: "bad", AggregationLength: ptr(40)}, {Name: "a", Pools: []string{"edge"}}}, []string{"edge"}},
		"a name that is no pool":            {[]Advertisement{{Name: "a", Pools: []string{"gone"}}}, nil},
	} {
		t.Run(name, func(t *testing.T) {
			in.Advertisements = tc.advs
			if got := AdvertisedPools(in); !slices.Equal(got, tc.want) {
				t.Errorf("AdvertisedPools = %v, want %v", got, tc.want)
			}
		})
	}
}
