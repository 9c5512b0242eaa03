package doctor

import (
	"net/netip"
	"strings"
	"testing"
	"time"
)

func clean() Inputs {
	return Inputs{
		Pools:    []Pool{{Name: "lan", Ranges: []Range{{netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("192.0.2.220")}}}},
		Policies: 1,
		Nodes: []Node{
			{Name: "n1", Subnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Announcing: true, Metrics: &AgentMetrics{}, Readiness: &Readiness{Ready: true}},
			{Name: "n2", Subnets: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}, Announcing: true, Metrics: &AgentMetrics{}, Readiness: &Readiness{Ready: true}},
		},
		Services: []Service{{Namespace: "d", Name: "web", Addrs: []netip.Addr{netip.MustParseAddr("192.0.2.200")},
			AnnouncedBy: map[netip.Addr]string{netip.MustParseAddr("192.0.2.200"): "n1"}, Ours: true}},
		KubeProxy:         KubeProxy{Found: true, Mode: "nftables"},
		PolicyGenerations: map[string]int64{"l2": 3},
		Agents: []Agent{{Node: "n1", Reports: true, Policies: map[string]int64{"l2": 3}},
			{Node: "n2", Reports: true, Policies: map[string]int64{"l2": 3}}},
		Audit: &Audit{Interface: "eth0", Addrs: []AuditAddr{
			{Addr: netip.MustParseAddr("192.0.2.200"), Service: "d/web", Mooring: "n1", Responders: []Responder{{MAC: mac1, Node: "n1"}}},
			{Addr: netip.MustParseAddr("192.0.2.201")},
		}},
	}
}

const (
	mac1 = "02:00:00:00:00:01"
	mac2 = "02:00:00:00:00:02"
	mac9 = "02:00:00:00:00:09"
)

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
			in.Foreign.MetalLBSpeakers = []Workload{{Kind: "Pod", Namespace: "metallb-system", Name: "speaker-x", Node: "n1"}}
			in.Foreign.MetalLBPools = []Pool{{Name: "metallb-system/old", Ranges: []Range{{netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("192.0.2.200")}}}}
			in.Foreign.MetalLBAnnouncers = map[string]string{"d/web": "n1", "d/gone": "n7"}
		}, Problem, []string{"MetalLB", "1 speaker(s) (Pod metallb-system/speaker-x on n1)", "announce 1 Service(s) now (ServiceL2Status): d/web from n1",
			"192.0.2.200 (d/web, MetalLB pool metallb-system/old)"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.MetalLBControllers = []Workload{{Kind: "Pod", Namespace: "metallb-system", Name: "controller-y"}}
		}, Problem, []string{"MetalLB runs: controller (Pod metallb-system/controller-y)"}},
		{"other-load-balancer", func(in *Inputs) {
			// A DaemonSet whose status says nothing runs: its Pods decide.
			in.Foreign.MetalLBIdle = []Workload{{Kind: "DaemonSet", Namespace: "metallb-system", Name: "speaker"}}
		}, Info, []string{"none of their Pods runs"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.CiliumLeases = []Workload{{Kind: "Lease", Namespace: "kube-system", Name: "cilium-l2announce-d-web", Service: "d/web", Node: "n2"}}
		}, Problem, []string{"Cilium", "d/web held by n2", "192.0.2.200 (d/web)"}},
		{"arp-audit", func(in *Inputs) {
			// Before the migration: MetalLB's speaker on n2 answers, Mooring
			// announces nothing.
			in.Audit.Addrs[0].Mooring, in.Audit.Addrs[0].Responders = "", []Responder{{MAC: mac2, Node: "n2"}}
			in.Services[0].AnnouncedBy = map[netip.Addr]string{}
			in.Foreign.MetalLBAnnouncers = map[string]string{"d/web": "n2"}
		}, Problem, []string{"foreign MAC " + mac2, "node n2", "192.0.2.200 (d/web)", "MetalLB's speaker on n2 announces 1 of them"}},
		{"arp-audit", func(in *Inputs) {
			// A free pool address someone answers for: a stale VIP.
			in.Audit.Addrs[1].Responders = []Responder{{MAC: mac9}}
		}, Problem, []string{"foreign MAC " + mac9, "a host that is no node", "192.0.2.201 (no Service holds it)"}},
		{"arp-audit", func(in *Inputs) { in.Audit.Addrs[0].Responders = nil }, Problem, []string{"nobody answers", "192.0.2.200", "n1"}},
		{"arp-audit", func(in *Inputs) { in.Audit = &Audit{Skipped: "no --interface"} }, Info, []string{"no --interface"}},
		{"agent-dataplane", func(in *Inputs) {
			in.Nodes[1].Readiness = &Readiness{Reasons: []string{"responder: NDP socket on eth0 (2): setsockopt: cannot allocate memory"}}
			in.Nodes[1].Metrics.StepFailures = map[string]StepCounter{"responder-open": {Series: `mooring_responder_errors_total{op="open"}`, Value: 37}}
		}, Problem, []string{"n2", "not ready now", "cannot allocate memory", `responder-open (mooring_responder_errors_total{op="open"} = 37)`}},
		{"agent-dataplane", func(in *Inputs) {
			in.Nodes[1].Metrics.StepsFailing = []string{"read-addresses"}
			in.Nodes[1].Metrics.StepFailures = map[string]StepCounter{"read-addresses": {Series: `mooring_agent_dataplane_failures_total{step="read-addresses"}`, Value: 5}}
		}, Problem, []string{"n2", "fails data-plane steps now: read-addresses", "= 5"}},
		{"agent-dataplane", func(in *Inputs) {
			in.Nodes[0].Metrics.StepFailures = map[string]StepCounter{"responder-open": {Series: `mooring_responder_errors_total{op="open"}`, Value: 2}}
		}, Warning, []string{"n1", "since it started, none now", "= 2"}},
		{"agent-dataplane", func(in *Inputs) {
			in.Nodes[0].Readiness = &Readiness{Reasons: []string{"holding down after a restart or a drain (--hold-down 2s): ..."}}
		}, Info, []string{"n1", "holding down"}},
		{"agent-metrics", func(in *Inputs) {
			in.Nodes[1].Metrics, in.Nodes[1].MetricsErr = nil, "dial tcp 192.0.2.12:9473: i/o timeout"
		}, Warning, []string{"n2", "unreachable", "i/o timeout"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.KubeVIP = []Workload{{Kind: "Pod", Namespace: "kube-system", Name: "kube-vip-n1"}}
		}, Problem, []string{"kube-vip"}},
		{"other-load-balancer", func(in *Inputs) {
			in.Foreign.ServiceLB = []Workload{{Kind: "Pod", Namespace: "kube-system", Name: "svclb-web-x1", Service: "d/web"}}
		}, Problem, []string{"servicelb", "d/web"}},
		{"split-brain", func(in *Inputs) {
			in.Nodes[0].Metrics.SplitBrain = 1
			in.Events = append(in.Events, Event{Reason: ReasonSplitBrain, Node: "n1", Service: "d/web", Age: "1m", Message: "aa:bb also answered"})
		}, Problem, []string{"aa:bb", "counts 1 now"}},
		{"split-brain", func(in *Inputs) {
			in.Events = append(in.Events, Event{Reason: ReasonSplitBrain, Node: "n3", Service: "d/web", Age: "1m", Message: "aa:bb also answered"})
		}, History, []string{"history", "aa:bb", "no node n3 now"}},
		{"agent-counters", func(in *Inputs) { in.Nodes[0].Metrics.WriteErrors = 37 }, Warning, []string{"n1", "37"}},
		{"agent-config", func(in *Inputs) { in.Agents[0].Policies["l2"] = 2 }, Problem, []string{"n1", "generation 2, the cluster's at 3"}},
		{"agent-config", func(in *Inputs) { in.Agents[1].Policies = map[string]int64{"l2": 3, "gone": 1} }, Problem, []string{"n2", "gone (generation 1) was deleted but still applied"}},
		{"agent-config", func(in *Inputs) { in.Agents[1].Reports, in.Agents[1].Policies = false, nil }, Info, []string{"n2", "does not report"}},
		{"gossip-key", func(in *Inputs) { in.Nodes[1].Metrics.GossipInsecure = 1 }, Problem, []string{"n2", "without a key"}},
		{"agent-memory-limit", func(in *Inputs) { in.Nodes[0].Metrics.MemoryLimit = 1 }, Warning, []string{"n1", "soft memory limit"}},
		{"bgp-sessions", func(in *Inputs) {
			in.BGPSessions = []BGPSession{{Node: "n1", Peer: "tor", Address: "192.0.2.1", Established: true, Received: 999},
				{Node: "n2", Peer: "tor", Address: "192.0.2.1", State: "Active", Reason: "AuthFailure", Message: "set the router's password to the Secret's"}}
		}, Problem, []string{"n2 to tor (192.0.2.1) is Active (AuthFailure)", "BGPPeer/tor"}},
		{"bgp-sessions", func(in *Inputs) {
			in.BGPSessions = []BGPSession{{Node: "n1", Peer: "tor", Address: "192.0.2.1", Established: true, Received: 20000}}
		}, Warning, []string{"sends n1 to tor (192.0.2.1) 20000 prefixes", "~14 MiB"}},
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

// Now from then (issue 18): an Event no live check confirms is history —
// shown, never counted — whether the agent counts none now or its metrics
// cannot be read; the ARP/NDP audit seeing the second responder now makes
// it current again.
func TestOldEventsAreHistory(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	in := clean()
	in.Events = []Event{{Reason: ReasonStaleLocalAddress, Node: "n2", Service: "d/web", Age: "50m0s", Message: "node n2 has 192.0.2.200 on lo", Time: now.Add(-50 * time.Minute)},
		// An older one of the same node and Service: only the newest shows.
		{Reason: ReasonStaleLocalAddress, Node: "n2", Service: "d/web", Age: "55m0s", Message: "older", Time: now.Add(-55 * time.Minute)}}
	fs := Run(in)
	if len(fs) != 1 || fs[0].Severity != History || !strings.Contains(fs[0].Message, "the agent on n2 counts none now") || HasProblem(fs) {
		t.Fatalf("gauge 0: %+v", fs)
	}
	// The agents' metrics blocked, only the old Event: history, and the
	// unreachable metrics a warning of their own; no problem.
	for i := range in.Nodes {
		in.Nodes[i].Metrics, in.Nodes[i].MetricsErr = nil, "context deadline exceeded"
	}
	fs = Run(in)
	var hist, warn int
	for _, f := range fs {
		switch {
		case f.Severity == History && strings.Contains(f.Message, "cannot be read") && strings.Contains(f.Message, "at most one responder"):
			hist++
		case f.Severity == Warning && f.Check == "agent-metrics":
			warn++
		default:
			t.Errorf("unexpected %+v", f)
		}
	}
	if hist != 1 || warn != 2 || HasProblem(fs) {
		t.Fatalf("metrics blocked, old Event: %d history, %d warnings: %+v", hist, warn, fs)
	}
	// The same, with the stale copy answering now: current.
	in.Audit.Addrs[0].Responders = append(in.Audit.Addrs[0].Responders, Responder{MAC: mac2, Node: "n2"})
	fs = Run(in)
	if !HasProblem(fs) || fs[0].Check != "stale-local-address" || !strings.Contains(fs[0].Message, "seen now by the ARP/NDP audit: 192.0.2.200 answered by "+mac1+" (n1), "+mac2+" (n2)") {
		t.Fatalf("confirmed by the audit: %+v", fs)
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
