package announce

import (
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The owner is whoever ranks first among the live eligible nodes, for both
// families, and only the owner has local entries (on every non-loopback
// interface when the policy names none).
func TestDecideOwnerAnswersOnEveryNonLoopbackInterface(t *testing.T) {
	for _, a := range []string{"10.213.0.100", "fd00:213::64"} {
		owner := ownerAmong(a, "node-1", "node-2", "node-3")
		for _, local := range []string{"node-1", "node-2", "node-3"} {
			in := lab(local)
			in.Services = []Service{{Key: key("web"), IngressIPs: ips(a)}}
			r := Decide(in)
			if got := mustOwner(t, r, a); got != owner {
				t.Fatalf("%s: owner %s, want %s", a, got, owner)
			}
			var want []Entry
			if local == owner {
				want = []Entry{{Addr: ip(a), IfIndex: 2, IfName: "eth0"}, {Addr: ip(a), IfIndex: 3, IfName: "eth1"}}
			}
			if !reflect.DeepEqual(r.Local, want) {
				t.Fatalf("%s on %s: Local = %v, want %v", a, local, r.Local, want)
			}
			if len(r.Problems) != 0 {
				t.Fatalf("problems: %v", r.Problems)
			}
		}
	}
}

func TestDecideTable(t *testing.T) {
	const a = "10.213.0.100"
	worker := &Selector{MatchLabels: map[string]string{"role": "worker"}}
	tests := []struct {
		name  string
		edit  func(in *Input)
		check func(t *testing.T, r Result)
	}{
		{
			name: "node selector limits candidates",
			edit: func(in *Input) {
				in.Nodes[1].Labels["role"] = "worker"
				in.Policies[0].NodeSelector = worker
			},
			check: func(t *testing.T, r Result) {
				if o := mustOwner(t, r, a); o != "node-2" {
					t.Fatalf("owner %s, want node-2 (the only worker)", o)
				}
			},
		},
		{
			name: "dead member is not eligible",
			edit: func(in *Input) {
				in.Members = slices.DeleteFunc(in.Members, func(m string) bool { return m == ownerAmong(a, "node-1", "node-2", "node-3") })
			},
			check: func(t *testing.T, r Result) {
				first := ownerAmong(a, "node-1", "node-2", "node-3")
				rest := slices.DeleteFunc([]string{"node-1", "node-2", "node-3"}, func(n string) bool { return n == first })
				if o := mustOwner(t, r, a); o != ownerAmong(a, rest...) {
					t.Fatalf("owner %s, want the runner-up %s", o, ownerAmong(a, rest...))
				}
			},
		},
		{
			name: "gossip member without a Node object is not eligible",
			edit: func(in *Input) { in.Nodes = nodes("node-2"); in.Members = append(in.Members, "ghost") },
			check: func(t *testing.T, r Result) {
				if o := mustOwner(t, r, a); o != "node-2" {
					t.Fatalf("owner %s, want node-2", o)
				}
			},
		},
		{
			name: "externalTrafficPolicy Local: only nodes with a ready endpoint",
			edit: func(in *Input) {
				in.Services[0].LocalTraffic = true
				in.Services[0].ReadyNodes = []string{"node-3", "node-9"}
			},
			check: func(t *testing.T, r Result) {
				if o := mustOwner(t, r, a); o != "node-3" {
					t.Fatalf("owner %s, want node-3", o)
				}
			},
		},
		{
			name: "externalTrafficPolicy Local without endpoints: unowned, reported",
			edit: func(in *Input) { in.Services[0].LocalTraffic = true },
			check: func(t *testing.T, r Result) {
				if o := mustOwner(t, r, a); o != "" {
					t.Fatalf("owner %s, want none", o)
				}
				if len(r.Problems) != 1 || r.Problems[0].Addr != ip(a) || !strings.Contains(r.Problems[0].Message, "no live node") {
					t.Fatalf("problems %v", r.Problems)
				}
			},
		},
		{
			name: "service selector",
			edit: func(in *Input) {
				in.Policies[0].ServiceSelector = &Selector{MatchLabels: map[string]string{"l2": "yes"}}
				in.Services = append(in.Services, Service{Key: key("other"), Labels: map[string]string{"l2": "yes"}, IngressIPs: ips("10.213.0.101")})
			},
			check: func(t *testing.T, r Result) {
				if _, ok := r.OwnerOf(ip(a)); ok {
					t.Fatal("unselected Service announced")
				}
				mustOwner(t, r, "10.213.0.101")
			},
		},
		{
			name: "externalIPs only when the policy says so",
			edit: func(in *Input) {
				in.Services[0].ExternalIPs = ips("192.0.2.7")
				in.Policies = append(in.Policies, Policy{Name: "ext", ExternalIPs: true,
					ServiceSelector: &Selector{MatchLabels: map[string]string{"ext": "1"}}})
				in.Services = append(in.Services, Service{Key: key("ext"), Labels: map[string]string{"ext": "1"},
					IngressIPs: ips("10.213.0.102"), ExternalIPs: ips("192.0.2.8")})
			},
			check: func(t *testing.T, r Result) {
				got := slices.Collect(func(yield func(netip.Addr) bool) {
					for _, o := range r.Owners {
						yield(o.Addr)
					}
				})
				// 10.213.0.102 is announced via policy "all" (LB IPs of every
				// Service); 192.0.2.7 by no policy.
				want := ips("10.213.0.100", "10.213.0.102", "192.0.2.8")
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("announced %v, want %v", got, want)
				}
			},
		},
		{
			name:  "loadBalancerIPs false",
			edit:  func(in *Input) { in.Policies[0].LoadBalancerIPs = false },
			check: func(t *testing.T, r Result) { wantNoOwners(t, r) },
		},
		{
			name: "unannounceable addresses are ignored, mapped ones unmapped",
			edit: func(in *Input) {
				in.Services[0].IngressIPs = append(in.Services[0].IngressIPs,
					ip("127.0.0.1"), ip("0.0.0.0"), ip("224.0.0.5"), ip("fe80::1"), ip("::"), ip("::ffff:10.213.0.103"), netip.Addr{})
			},
			check: func(t *testing.T, r Result) {
				if len(r.Owners) != 2 || r.Owners[0].Addr != ip(a) || r.Owners[1].Addr != ip("10.213.0.103") {
					t.Fatalf("owners %v", r.Owners)
				}
			},
		},
		{
			name: "shared address: only nodes eligible for every Service",
			edit: func(in *Input) {
				in.Services[0].LocalTraffic = true
				in.Services[0].ReadyNodes = []string{"node-1", "node-2"}
				in.Services = append(in.Services, Service{Key: key("web-udp"), IngressIPs: ips(a), LocalTraffic: true, ReadyNodes: []string{"node-2", "node-3"}})
			},
			check: func(t *testing.T, r Result) {
				o := r.Owners[0]
				if o.Node != "node-2" || o.Eligible != 1 || !reflect.DeepEqual(o.Services, []ServiceKey{key("web"), key("web-udp")}) {
					t.Fatalf("owner %+v, want node-2 for both Services", o)
				}
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := lab("node-1")
			in.Services = []Service{{Key: key("web"), IngressIPs: ips(a)}}
			tt.edit(&in)
			tt.check(t, Decide(in))
		})
	}
}

func wantNoOwners(t *testing.T, r Result) {
	t.Helper()
	if len(r.Owners) != 0 {
		t.Fatalf("owners %v, want none", r.Owners)
	}
}

func TestDecideInterfaces(t *testing.T) {
	const a = "10.213.0.100"
	ifaces := []Interface{{Name: "lo", Index: 1, Loopback: true}, {Name: "eth0", Index: 2}, {Name: "veth0abc", Index: 3}, {Name: "eth1", Index: 4}, {Name: "bond0", Index: 5}}
	tests := []struct {
		name  string
		exprs []string
		want  []string
	}{
		{"empty: all but loopback", nil, []string{"eth0", "veth0abc", "eth1", "bond0"}},
		{"anchored at both ends", []string{"eth0"}, []string{"eth0"}},
		{"alternation is anchored too", []string{"eth0|bond0"}, []string{"eth0", "bond0"}},
		{"pattern", []string{"eth.*"}, []string{"eth0", "eth1"}},
		{"several", []string{"eth1", "bond[0-9]"}, []string{"eth1", "bond0"}},
		{"explicit loopback", []string{"lo"}, []string{"lo"}},
		{"no match", []string{"wlan0"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := lab("node-1")
			in.Nodes, in.Members = nodes("node-1"), []string{"node-1"}
			in.Interfaces = ifaces
			in.Policies[0].Interfaces = tt.exprs
			in.Services = []Service{{Key: key("web"), IngressIPs: ips(a)}}
			r := Decide(in)
			var got []string
			for _, e := range r.Local {
				got = append(got, e.IfName)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("answers on %v, want %v", got, tt.want)
			}
			if (tt.want == nil) != (len(r.Problems) == 1) {
				t.Fatalf("problems %v", r.Problems)
			}
		})
	}
}

// Two policies for different nodes and interfaces: a node answers only on
// the interfaces of the policy that selected it.
func TestDecideInterfacesFollowTheSelectingPolicy(t *testing.T) {
	const a = "10.213.0.100"
	in := lab("node-1")
	in.Nodes[0].Labels["zone"] = "a"
	in.Nodes[1].Labels["zone"] = "b"
	in.Nodes, in.Members = in.Nodes[:2], []string{"node-1", "node-2"}
	in.Policies = []Policy{
		{Name: "zone-a", LoadBalancerIPs: true, NodeSelector: &Selector{MatchLabels: map[string]string{"zone": "a"}}, Interfaces: []string{"eth0"}},
		{Name: "zone-b", LoadBalancerIPs: true, NodeSelector: &Selector{MatchLabels: map[string]string{"zone": "b"}}, Interfaces: []string{"eth1"}},
	}
	in.Services = []Service{{Key: key("web"), IngressIPs: ips(a)}}
	for _, local := range []string{"node-1", "node-2"} {
		in.Local = local
		r := Decide(in)
		if r.Owners[0].Node != local {
			continue
		}
		want := map[string]string{"node-1": "eth0", "node-2": "eth1"}[local]
		if len(r.Local) != 1 || r.Local[0].IfName != want {
			t.Fatalf("%s answers on %v, want only %s", local, r.Local, want)
		}
		if !reflect.DeepEqual(r.Listen, in.Interfaces[1:]) {
			t.Fatalf("Listen %v, want eth0 and eth1", r.Listen)
		}
	}
}

// A broken policy is reported and skipped; the others keep working.
func TestDecideInvalidPolicies(t *testing.T) {
	in := lab("node-1")
	in.Policies = append(in.Policies,
		Policy{Name: "bad-regex", LoadBalancerIPs: true, Interfaces: []string{"eth0", "eth[0-"}},
		Policy{Name: "bad-node-selector", LoadBalancerIPs: true,
			NodeSelector: &Selector{MatchExpressions: []Requirement{{Key: "zone", Operator: "Equals"}}}},
		Policy{Name: "bad-service-selector", ExternalIPs: true,
			ServiceSelector: &Selector{MatchExpressions: []Requirement{{Key: "app", Operator: OpIn}}}},
		Policy{Name: "empty-regex", LoadBalancerIPs: true, Interfaces: []string{""}},
	)
	in.Services = []Service{{Key: key("web"), IngressIPs: ips("10.213.0.100"), ExternalIPs: ips("192.0.2.1")}}
	r := Decide(in)
	got := map[string]string{}
	for _, p := range r.Problems {
		got[p.Policy] = p.Field
	}
	want := map[string]string{
		"bad-regex":            "spec.interfaces[1]",
		"bad-node-selector":    "spec.nodeSelector",
		"bad-service-selector": "spec.serviceSelector",
		"empty-regex":          "spec.interfaces[0]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("problems %v, want fields %v", r.Problems, want)
	}
	if len(r.Owners) != 1 || r.Owners[0].Addr != ip("10.213.0.100") || r.Owners[0].Eligible != 3 {
		t.Fatalf("owners %v: policy \"all\" must keep working, the broken ones add nothing", r.Owners)
	}
	if len(r.PolicyProblems("bad-regex")) != 1 {
		t.Fatal("PolicyProblems")
	}
}

func TestStatusWriter(t *testing.T) {
	in := lab("node-3")
	if r := Decide(in); r.StatusWriter != "node-1" {
		t.Fatalf("StatusWriter %q, want node-1", r.StatusWriter)
	}
	in.Members = []string{"node-2", "node-3"}
	if r := Decide(in); r.StatusWriter != "node-2" {
		t.Fatalf("StatusWriter %q, want node-2 after node-1 died", r.StatusWriter)
	}
	in.Nodes[2].Labels["role"] = "worker"
	in.Policies[0].NodeSelector = &Selector{MatchLabels: map[string]string{"role": "worker"}}
	if r := Decide(in); r.StatusWriter != "node-3" {
		t.Fatalf("StatusWriter %q, want node-3, the only eligible one", r.StatusWriter)
	}
	in.Policies[0].NodeSelector = &Selector{MatchLabels: map[string]string{"role": "bad value"}}
	if r := Decide(in); r.StatusWriter != "node-2" {
		t.Fatalf("StatusWriter %q, want node-2 (first live node) when no policy is valid", r.StatusWriter)
	}
}

// The ranking is part of the wire contract between agents of a cluster: if
// it changed between releases, a rolling upgrade would make two versions
// disagree about owners. These values must never change without changing
// hashVersion and documenting it.
func TestScoreIsStable(t *testing.T) {
	got := []uint64{Score("node-1", ip("10.213.0.100")), Score("node-2", ip("fd00:213::64")), Score("", netip.Addr{})}
	want := []uint64{0x6775566db2d48b33, 0xc186d86efb636cdc, 0xd963fee78a289482}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Score changed: got %#v, want %#v", got, want)
	}
	if Score("node-1", ip("::ffff:10.213.0.100")) != Score("node-1", ip("10.213.0.100")) {
		t.Fatal("a mapped address must rank as its IPv4 form")
	}
}
