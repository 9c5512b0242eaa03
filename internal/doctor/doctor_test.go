package doctor

import (
	"net/netip"
	"strings"
	"testing"
)

func clean() Inputs {
	return Inputs{
		Pools:    []Pool{{Name: "lan", Ranges: []Range{{netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("192.0.2.220")}}}},
		Policies: 1,
		Nodes: []Node{
			{Name: "n1", Subnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Announcing: true, Metrics: &AgentMetrics{}},
			{Name: "n2", Subnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Announcing: true, Metrics: &AgentMetrics{}},
		},
		Services: []Service{{Namespace: "d", Name: "web", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.200")},
			AnnouncedBy: map[netip.Addr]string{netip.MustParseAddr("192.0.2.200"): "n1"}, Ours: true}},
		KubeProxy:         KubeProxy{Found: true, Mode: "nftables"},
		PolicyGenerations: map[string]int64{"l2": 3},
		Agents: []Agent{{Node: "n1", Reports: true, Policies: map[string]int64{"l2": 3}},
			{Node: "n2", Reports: true, Policies: map[string]int64{"l2": 3}}},
	}
}

func TestCleanClusterReportsNothing(t *testing.T) {
	if fs := Run(clean()); len(fs) != 0 {
		t.Fatalf("clean snapshot: %+v", fs)
	}
	in := clean()
	in.KubeProxy = KubeProxy{Found: true, Mode: "ipvs", StrictARP: true}
	if fs := Run(in); len(fs) != 0 {
		t.Fatalf("IPVS with strictARP: %+v", fs)
	}
}

// Each planted problem is found by its check, names what it is about, and
// nothing else fires.
func TestEachCheckFindsItsProblem(t *testing.T) {
	for _, tc := range []struct {
		check string
		plant func(*Inputs)
		sev   Severity
		want  []string
	}{
		{"pool-subnet", func(in *Inputs) {
			in.Pools = append(in.Pools, Pool{Name: "far", Ranges: []Range{{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.9")}}})
		}, Problem, []string{"far", "198.51.100.1-198.51.100.9", "192.0.2.0/24"}},
		{"pool-subnet", func(in *Inputs) {
			for i := range in.Nodes {
				in.Nodes[i].Announcing = false
			}
		}, Problem, []string{"no node is selected"}},
		{"stale-local-address", func(in *Inputs) {
			in.Nodes[1].Metrics.StaleLocal = 1
			in.Events = append(in.Events, Event{Reason: ReasonStaleLocalAddress, Node: "n2", Service: "d/web", Age: "5s", Message: "node n2 has 192.0.2.200 configured on kube-ipvs0"})
		}, Problem, []string{"n2", "kube-ipvs0"}},
		{"kube-proxy", func(in *Inputs) { in.KubeProxy = KubeProxy{Found: true, Mode: "ipvs"} }, Problem, []string{"strictARP"}},
		{"l2-and-bgp", func(in *Inputs) {
			in.BGPPeers = []BGPPeer{{Name: "tor", Address: netip.MustParseAddr("192.0.2.1")}}
			in.Services[0].AdvertisedBy = map[netip.Addr][]string{netip.MustParseAddr("192.0.2.200"): {"n1", "n2"}}
		}, Problem, []string{"192.0.2.200", "n1 answers ARP/NDP", "tor", "n1, n2"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.MetalLBSpeakers = []Workload{{Kind: "DaemonSet", Namespace: "metallb-system", Name: "speaker"}}
			in.Foreign.MetalLBPools = []Pool{{Name: "metallb-system/old", Ranges: []Range{{netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("192.0.2.200")}}}}
		}, Problem, []string{"MetalLB", "192.0.2.200 (d/web, MetalLB pool metallb-system/old)"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.CiliumLeases = []Workload{{Kind: "Lease", Namespace: "kube-system", Name: "cilium-l2announce-d-web", Service: "d/web"}}
		}, Problem, []string{"Cilium", "192.0.2.200 (d/web)"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.KubeVIP = []Workload{{Kind: "Pod", Namespace: "kube-system", Name: "kube-vip-n1"}}
		}, Problem, []string{"kube-vip"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.ServiceLB = []Workload{{Kind: "Pod", Namespace: "kube-system", Name: "svclb-web-x1", Service: "d/web"}}
		}, Problem, []string{"servicelb", "d/web"}},
		{"split-brain", func(in *Inputs) {
			in.Events = append(in.Events, Event{Reason: ReasonSplitBrain, Node: "n3", Service: "d/web", Age: "1m", Message: "aa:bb also answered"})
		}, Problem, []string{"aa:bb"}},
		{"agent-counters", func(in *Inputs) { in.Nodes[0].Metrics.WriteErrors = 37 }, Warning, []string{"n1", "37"}},
		{"agent-config", func(in *Inputs) { in.Agents[0].Policies["l2"] = 2 }, Problem, []string{"n1", "generation 2, the cluster's at 3"}},
		{"agent-config", func(in *Inputs) { in.Agents[1].Policies = map[string]int64{"l2": 3, "gone": 1} }, Problem, []string{"n2", "gone (generation 1) was deleted but still applied"}},
		{"agent-config", func(in *Inputs) { in.Agents[1].Reports, in.Agents[1].Policies = false, nil }, Info, []string{"n2", "does not report"}},
		{"gossip-key", func(in *Inputs) { in.Nodes[1].Metrics.GossipInsecure = 1 }, Problem, []string{"n2", "without a key"}},
	} {
		t.Run(tc.check, func(t *testing.T) {
			in := clean()
			tc.plant(&in)
			fs := Run(in)
			if len(fs) != 1 {
				t.Fatalf("want one finding, got %+v", fs)
			}
			f := fs[0]
			if f.Check != tc.check || f.Severity != tc.sev || f.Fix == "" {
				t.Errorf("finding %+v: want check %s, severity %s and a fix", f, tc.check, tc.sev)
			}
			for _, w := range tc.want {
				if !strings.Contains(f.Message+" "+f.Node+" "+f.Object, w) {
					t.Errorf("finding %q does not mention %q", f.Message, w)
				}
			}
			if HasProblem(fs) != (tc.sev == Problem) {
				t.Errorf("HasProblem = %v", HasProblem(fs))
			}
		})
	}
}

// An old Event is history: when the node's gauge says the stale address is
// gone, doctor does not report it.
func TestResolvedStaleEventIsNotReported(t *testing.T) {
	in := clean()
	in.Events = []Event{{Reason: ReasonStaleLocalAddress, Node: "n2", Service: "d/web", Age: "1h"}}
	if fs := Run(in); len(fs) != 0 {
		t.Fatalf("%+v", fs)
	}
	in.Nodes[1].Metrics = nil // no metrics: the Event is all we know
	fs := Run(in)
	if len(fs) != 2 || fs[0].Check != "stale-local-address" || fs[1].Severity != Info {
		t.Fatalf("%+v", fs)
	}
}

// BGP done right raises nothing: a routed pool off the nodes' segment, an
// address advertised over BGP to a router on another segment while L2
// serves the local one, and a BGP-only cluster without L2 policies.
func TestBGPWithoutMistakes(t *testing.T) {
	in := clean()
	in.Pools = append(in.Pools, Pool{Name: "routed", BGP: true, Ranges: []Range{{netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.9")}}})
	in.BGPPeers = []BGPPeer{{Name: "tor", Address: netip.MustParseAddr("203.0.113.1")}}
	in.Services[0].AdvertisedBy = map[netip.Addr][]string{netip.MustParseAddr("192.0.2.200"): {"n1"}}
	if fs := Run(in); len(fs) != 0 {
		t.Fatalf("findings: %+v", fs)
	}
	in.Pools = in.Pools[1:]
	for i := range in.Nodes {
		in.Nodes[i].Announcing = false
	}
	in.Services[0].AnnouncedBy = nil
	if fs := Run(in); len(fs) != 0 {
		t.Fatalf("BGP-only cluster: %+v", fs)
	}
}

// Issue 19 item 9: a pool containing a node's own address is a problem
// (a warning when the pool is disabled); one next to it is not.
func TestPoolContainingANodeAddress(t *testing.T) {
	in := clean()
	in.Nodes[0].Addresses = []netip.Addr{netip.MustParseAddr("192.0.2.199")}
	in.Nodes[1].Addresses = []netip.Addr{netip.MustParseAddr("192.0.2.210"), netip.MustParseAddr("2001:db8::210")}
	fs := Run(in)
	if len(fs) != 1 || fs[0].Check != "pool-node-address" || fs[0].Severity != Problem || fs[0].Fix == "" ||
		!strings.Contains(fs[0].Message, "192.0.2.210 (node n2)") || strings.Contains(fs[0].Message, "192.0.2.199") || fs[0].Object != "LoadBalancerIPPool/lan" {
		t.Fatalf("%+v", fs)
	}
	in.Pools[0].Disabled = true
	if fs := Run(in); len(fs) != 1 || fs[0].Severity != Warning {
		t.Fatalf("disabled pool: %+v", fs)
	}
}
