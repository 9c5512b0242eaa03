package announce

import (
	"bytes"
	"crypto/sha256"
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// The orders below were computed by hand, outside Go, with Python's
// hashlib: sorted(nodes, key=lambda n: sha256((n+"#"+ip).encode()).digest()),
// which is MetalLB's sortL2Candidates without preferred nodes.
func TestMetalLBRankingOrder(t *testing.T) {
	five := []string{"node-1", "node-2", "node-3", "lab-control-plane", "worker-a"}
	for _, tc := range []struct {
		addr string
		want []string
	}{
		{"10.213.0.100", []string{"node-3", "node-2", "worker-a", "lab-control-plane", "node-1"}},
		{"10.213.0.101", []string{"node-3", "node-2", "worker-a", "lab-control-plane", "node-1"}},
		{"fd00:213::64", []string{"lab-control-plane", "node-2", "node-3", "node-1", "worker-a"}},
	} {
		a := ip(tc.addr)
		// Take the owner away one by one: each time the next in MetalLB's
		// order must own the address, in Decide and in State alike.
		for k := range tc.want {
			live := tc.want[k:]
			in := Input{Policies: []Policy{{Name: "imported", LoadBalancerIPs: true, Ranking: RankingMetalLB}},
				Nodes: nodes(five...), Members: live, Local: "node-1",
				Services: []Service{{Key: key("web"), IngressIPs: []netip.Addr{a}}}}
			if got, _ := Decide(in).OwnerOf(a); got != tc.want[k] {
				t.Errorf("%s with %v live: Decide owner %q, want %q", a, live, got, tc.want[k])
			}
			s := NewState("node-1")
			s.SetNodes(in.Nodes)
			s.SetPolicies(in.Policies)
			s.SetMembers(five)
			s.SetService(new(in.Services[0]))
			s.SetMembers(live)
			if got, _ := s.Owner(a); got != tc.want[k] {
				t.Errorf("%s with %v live: State owner %q, want %q", a, live, got, tc.want[k])
			}
		}
	}
	// sha256("node-1#10.213.0.100") starts ecbe2f7a7ca49138 (hashlib).
	if got, want := MetalLBScore("node-1", ip("10.213.0.100")), ^uint64(0xecbe2f7a7ca49138); got != want {
		t.Errorf("MetalLBScore = %#x, want %#x", got, want)
	}
	if MetalLBScore("node-1", ip("::ffff:10.213.0.100")) != MetalLBScore("node-1", ip("10.213.0.100")) {
		t.Error("a v4-mapped address must rank as its IPv4 form (MetalLB's net.IP prints it so)")
	}
}

// A dual-stack Service is announced from one node by MetalLB: the one its
// FIRST ingress address ranks first, for both addresses (10.213.0.100 ranks
// node-3 first; fd00:213::64 alone would go to node-2).
func TestMetalLBRankingDualStack(t *testing.T) {
	v4, v6 := ip("10.213.0.100"), ip("fd00:213::64")
	in := lab("node-1")
	in.Policies[0].Ranking = RankingMetalLB
	in.Services = []Service{{Key: key("v6-alone"), IngressIPs: []netip.Addr{v6}}}
	if got, _ := Decide(in).OwnerOf(v6); got != "node-2" {
		t.Fatalf("fd00:213::64 alone: owner %q, want node-2", got)
	}
	in.Services = []Service{{Key: key("dual"), IngressIPs: []netip.Addr{v4, v6}}}
	s := NewState("node-1")
	s.SetNodes(in.Nodes)
	s.SetPolicies(in.Policies)
	s.SetMembers(in.Members)
	s.SetService(new(in.Services[0]))
	for _, a := range []netip.Addr{v4, v6} {
		if got, _ := Decide(in).OwnerOf(a); got != "node-3" {
			t.Errorf("dual-stack %s: Decide owner %q, want node-3", a, got)
		}
		if got, _ := s.Owner(a); got != "node-3" {
			t.Errorf("dual-stack %s: State owner %q, want node-3", a, got)
		}
	}
}

func TestRankingChoice(t *testing.T) {
	a := ip("10.213.0.100")
	in := lab("node-1")
	in.Services = []Service{{Key: key("web"), IngressIPs: []netip.Addr{a}}}
	in.Policies[0].Ranking = RankingMetalLB
	if got, _ := Decide(in).OwnerOf(a); got != "node-3" {
		t.Errorf("MetalLB ranking: owner %q, want node-3", got)
	}
	// A second, Mooring-ranked policy announcing the same address does not
	// take the MetalLB ranking away (rankingOf: any MetalLB policy wins).
	in.Policies = append(in.Policies, Policy{Name: "other", LoadBalancerIPs: true})
	if got, _ := Decide(in).OwnerOf(a); got != "node-3" {
		t.Errorf("mixed policies: owner %q, want node-3", got)
	}
	// Members of this build always agree; one of the build before MetalLB's
	// ranking ("mooring-hrw-v1") only while no policy uses it.
	for _, tc := range []struct {
		theirs string
		pols   []Policy
		want   bool
	}{
		{RankingVersion(), in.Policies, true},
		{RankingVersion(), in.Policies[1:], true},
		{"mooring-hrw-v1", in.Policies, false},
		{"mooring-hrw-v1", in.Policies[1:], true},
		{"mooring-hrw-v1+metallb-l2-sha256-v1+later", in.Policies, true},
		{"mooring-hrw-v2+metallb-l2-sha256-v1", in.Policies[1:], false},
		{"", nil, false},
	} {
		if got := RankingAgrees(tc.theirs, tc.pols); got != tc.want {
			t.Errorf("RankingAgrees(%q, %d policies) = %v, want %v", tc.theirs, len(tc.pols), got, tc.want)
		}
	}
	in.Policies = []Policy{{Name: "bad", LoadBalancerIPs: true, Ranking: "Random"}}
	res := Decide(in)
	if p := res.PolicyProblems("bad"); len(p) != 1 || p[0].Field != "spec.ranking" {
		t.Errorf("unknown ranking: problems %+v", p)
	}
	if _, ok := res.OwnerOf(a); ok {
		t.Error("an invalid policy must announce nothing")
	}
}

// FuzzMetalLBOwner checks the owner under RankingMetalLB against MetalLB's
// rule written independently (whole digests, bytes.Compare), and State
// against Decide after a membership change.
func FuzzMetalLBOwner(f *testing.F) {
	f.Add("node-1,node-2,node-3", []byte{10, 213, 0, 100}, uint8(5))
	f.Add("a,b,c,d,e,f", []byte{0xfd, 0, 2, 0x13, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x64}, uint8(3))
	f.Fuzz(func(t *testing.T, names string, raw []byte, mask uint8) {
		a, ok := netip.AddrFromSlice(raw)
		if !ok {
			return
		}
		if a, ok = announceable(a); !ok {
			return
		}
		all := slices.Compact(slices.Sorted(slices.Values(strings.Split(names, ","))))
		all = slices.DeleteFunc(all, func(n string) bool { return n == "" }) // no Node is unnamed
		if len(all) == 0 {
			return
		}
		if len(all) > 8 {
			all = all[:8]
		}
		var live []string
		for i, n := range all {
			if mask&(1<<i) != 0 {
				live = append(live, n)
			}
		}
		in := Input{Policies: []Policy{{Name: "p", LoadBalancerIPs: true, Ranking: RankingMetalLB}},
			Nodes: nodes(all...), Members: live, Local: all[0],
			Services: []Service{{Key: key("s"), IngressIPs: []netip.Addr{a}}}}
		want := ""
		var best [32]byte
		for _, n := range live {
			d := sha256.Sum256([]byte(n + "#" + a.String()))
			if want == "" || bytes.Compare(d[:], best[:]) < 0 {
				want, best = n, d
			}
		}
		got, _ := Decide(in).OwnerOf(a)
		if got != want {
			t.Fatalf("%s over %v: owner %q, MetalLB's %q", a, live, got, want)
		}
		s := NewState(all[0])
		s.SetNodes(in.Nodes)
		s.SetPolicies(in.Policies)
		s.SetMembers(all)
		s.SetService(new(in.Services[0]))
		s.SetMembers(live)
		if got, _ := s.Owner(a); got != want {
			t.Fatalf("%s over %v: State owner %q, MetalLB's %q", a, live, got, want)
		}
	})
}
