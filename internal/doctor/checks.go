package doctor

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// checkPoolSubnets: a pool whose addresses lie outside every announcing
// node's subnet hands out addresses nothing on the segment can reach (seed
// 002, failure 1). Pools advertised over BGP are routed to the nodes and
// need not lie on their segment.
func checkPoolSubnets(in Inputs) []Finding {
	var announcing []Node
	for _, n := range in.Nodes {
		if n.Announcing {
			announcing = append(announcing, n)
		}
	}
	var out []Finding
	l2Pools := slices.DeleteFunc(slices.Clone(in.Pools), func(p Pool) bool { return p.BGP })
	if len(announcing) == 0 {
		if len(l2Pools) > 0 && len(in.Nodes) > 0 {
			out = append(out, Finding{Severity: Problem, Object: "L2AnnouncementPolicy",
				Message: "no node is selected by any L2AnnouncementPolicy: no address of any pool is announced",
				Fix:     "create an L2AnnouncementPolicy whose nodeSelector selects the nodes on the Services' segment"})
		}
		return out
	}
	for _, p := range l2Pools {
		if p.Disabled {
			continue
		}
		for _, r := range p.Ranges {
			if coveredBy(r, announcing) {
				continue
			}
			assumed := slices.ContainsFunc(announcing, func(n Node) bool { return n.SubnetsAssumed })
			msg := fmt.Sprintf("pool %s: %s lies outside the subnets of every announcing node (%s): Services get these addresses but ARP/NDP for them never reaches a node",
				p.Name, r, subnetList(announcing))
			if assumed {
				msg += " (subnets assumed from the nodes' InternalIPs: give --node-subnet for exact ones)"
			}
			out = append(out, Finding{Severity: Problem, Object: "LoadBalancerIPPool/" + p.Name, Address: r.String(), Message: msg,
				Fix: "move the pool's block into the nodes' L2 network, or select nodes on that network in an L2AnnouncementPolicy"})
		}
	}
	return out
}

// coveredBy: every address of r lies in one subnet of some node.
func coveredBy(r Range, nodes []Node) bool {
	for _, n := range nodes {
		for _, s := range n.Subnets {
			if s.Contains(r.First) && s.Contains(r.Last) {
				return true
			}
		}
	}
	return false
}

func subnetList(nodes []Node) string {
	var ps []netip.Prefix
	for _, n := range nodes {
		for _, s := range n.Subnets {
			if !slices.Contains(ps, s) {
				ps = append(ps, s)
			}
		}
	}
	slices.SortFunc(ps, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	var out []string
	for _, p := range ps {
		out = append(out, p.String())
	}
	if len(out) == 0 {
		return "none known"
	}
	return strings.Join(out, ", ")
}

// checkKubeProxy: in IPVS mode without strictARP every node answers ARP for
// every LoadBalancer address it holds on kube-ipvs0.
func checkKubeProxy(in Inputs) []Finding {
	kp := in.KubeProxy
	if !kp.Found {
		return nil
	}
	if strings.EqualFold(kp.Mode, "ipvs") && !kp.StrictARP {
		return []Finding{{Severity: Problem, Object: "ConfigMap/kube-system/kube-proxy",
			Message: "kube-proxy runs in IPVS mode without strictARP: every node puts LoadBalancer addresses on kube-ipvs0 and answers ARP for them, beside the announcing node",
			Fix:     "set ipvs.strictARP: true in kube-system/kube-proxy's config.conf and restart kube-proxy"}}
	}
	return nil
}

// checkCounters: per-node retry and warning counters (seed 004: "Ready"
// with a loop inside). Failing writes and policy problems are warnings;
// metrics that cannot be read are said so, never guessed.
func checkCounters(in Inputs) []Finding {
	var out []Finding
	for _, n := range in.Nodes {
		m := n.Metrics
		if m == nil {
			continue // checkMetricsReach says why
		}
		if m.WriteErrors > 0 {
			out = append(out, Finding{Severity: Warning, Node: n.Name,
				Message: fmt.Sprintf("the agent on %s has failed %v API writes since it started (retried)", n.Name, m.WriteErrors),
				Fix:     "read the agent's log on that node; compare with other nodes: a count on one node only points at that node"})
		}
		if m.PolicyProblems > 0 {
			out = append(out, Finding{Severity: Warning, Node: n.Name,
				Message: fmt.Sprintf("the agent on %s skips %v L2AnnouncementPolicies as invalid", n.Name, m.PolicyProblems),
				Fix:     "kubectl get l2policy: fix the policies whose InvalidSpec condition is True"})
		}
	}
	return out
}

// checkAgentConfig: agents whose running configuration differs from the
// cluster's. Each agent records in its L2Announcer the policies and
// generations its last decision used; one that lags behind (a stuck
// informer, a decision loop that keeps failing, no apiserver connection)
// announces by an old configuration while it looks Ready.
func checkAgentConfig(in Inputs) []Finding {
	var out []Finding
	for _, a := range in.Agents {
		if !a.Reports {
			out = append(out, Finding{Severity: Info, Node: a.Node, Object: "L2Announcer/" + a.Node,
				Message: "the agent on " + a.Node + " does not report the configuration it applied (older than this mooring, or it has not read the policies yet)",
				Fix:     "upgrade the agent on " + a.Node + "; if it is current, look at its log: it cannot read the L2AnnouncementPolicies"})
			continue
		}
		var diffs []string
		for name, gen := range in.PolicyGenerations {
			switch got, ok := a.Policies[name]; {
			case !ok:
				diffs = append(diffs, fmt.Sprintf("L2AnnouncementPolicy %s (generation %d) is missing", name, gen))
			case got != gen:
				diffs = append(diffs, fmt.Sprintf("L2AnnouncementPolicy %s is at generation %d, the cluster's at %d", name, got, gen))
			}
		}
		for name, got := range a.Policies {
			if _, ok := in.PolicyGenerations[name]; !ok {
				diffs = append(diffs, fmt.Sprintf("L2AnnouncementPolicy %s (generation %d) was deleted but still applied", name, got))
			}
		}
		if len(diffs) == 0 {
			continue
		}
		slices.Sort(diffs)
		out = append(out, Finding{Severity: Problem, Node: a.Node, Object: "L2Announcer/" + a.Node,
			Message: "the agent on " + a.Node + " runs an old configuration: " + strings.Join(diffs, "; "),
			Fix: "look at the agent's log on " + a.Node + " (API errors, a failing decision loop) and its mooring_agent_api_writes_total; " +
				"if it does not catch up within seconds, restart it (run doctor again first: a change made a moment ago may still be on its way)"})
	}
	return out
}

// checkGossipKey: agents gossiping without a key (--insecure-gossip).
// Anyone who reaches such an agent's gossip port can join the cluster,
// claim a node's name and addresses, and spread false deaths.
func checkGossipKey(in Inputs) []Finding {
	var out []Finding
	for _, n := range in.Nodes {
		if n.Metrics == nil || n.Metrics.GossipInsecure == 0 {
			continue
		}
		out = append(out, Finding{Severity: Problem, Node: n.Name,
			Message: "the agent on " + n.Name + " gossips without a key (--insecure-gossip): anyone who reaches its gossip port can join, claim addresses and spread false deaths",
			Fix: "create the Secret mooring-gossip-key and run the agents with --gossip-key-file instead of --insecure-gossip " +
				"(chart: agent.gossipKey; plain manifests: docs/install.md#gossip-key)"})
	}
	return out
}

// checkMemoryLimit: agents whose Go heap presses on their soft memory
// limit (GOMEMLIMIT, the chart's agent.goMemLimit): the runtime then
// collects all the time, up to half a core, and the agent answers,
// decides and withdraws late while it looks Ready. The chart's 48 MiB
// holds at 10,000 Services, with BGP too; much larger clusters need more.
func checkMemoryLimit(in Inputs) []Finding {
	var out []Finding
	for _, n := range in.Nodes {
		if n.Metrics == nil || n.Metrics.MemoryLimit == 0 {
			continue
		}
		out = append(out, Finding{Severity: Warning, Node: n.Name,
			Message: "the agent on " + n.Name + " keeps a heap at its soft memory limit (GOMEMLIMIT): its garbage collector runs all the time and it serves late",
			Fix: "raise the chart's agent.goMemLimit and agent.resources.limits.memory with it (docs/bgp.md, At 10,000 Services); " +
				"the agent's log says how much it keeps"})
	}
	return out
}

// checkL2AndBGP: an address announced by L2 (a node answers ARP/NDP for it
// on a segment) and advertised over BGP to a router on that same segment
// reaches that router two ways — a /32 (/128) route spreading it over the
// advertising nodes, and the ARP answer of one node — so clients on the
// segment and behind the router take different paths, and an L2 failover
// no longer moves what the router forwards. Nearly always a mistake.
func checkL2AndBGP(in Inputs) []Finding {
	subnets := map[string][]netip.Prefix{}
	for _, n := range in.Nodes {
		subnets[n.Name] = n.Subnets
	}
	var out []Finding
	for _, s := range in.Services {
		for _, a := range s.Addrs {
			owner, l2 := s.AnnouncedBy[a]
			if !l2 || owner == "" || len(s.AdvertisedBy[a]) == 0 {
				continue
			}
			for _, sub := range subnets[owner] {
				if !sub.Contains(a) {
					continue
				}
				for _, p := range in.BGPPeers {
					if sub.Contains(p.Address) {
						out = append(out, Finding{Severity: Problem, Object: "Service/" + s.Key(), Node: owner, Address: a.String(),
							Message: fmt.Sprintf("%s is announced by L2 (%s answers ARP/NDP for it on %s) and advertised over BGP (by %s) to %s (%s) on the same segment: the router reaches it two ways",
								a, owner, sub, strings.Join(s.AdvertisedBy[a], ", "), p.Name, p.Address),
							Fix: "announce each pool one way on a segment: leave it out of the L2AnnouncementPolicy (serviceSelector) or out of the BGPAdvertisement (pools/poolSelectors); see docs/bgp.md"})
					}
				}
			}
		}
	}
	return out
}

// receivedWarn is how many prefixes a router may send a node before
// doctor warns: a default route and a few loopbacks are harmless, a table
// is not.
const receivedWarn = 1000

// receivedKiB is what a received route costs an agent (GoBGP's Adj-RIB-In:
// 13 MiB per 20,000, docs/benchmarks.md "Routes a router sends the agent").
const receivedKiB = 0.7

// checkBGPSessions: a node's session that is not Established advertises
// nothing to that router (a Problem, with the agent's reason and fix); a
// router that sends a node routes makes its agent keep every one in
// memory although it uses none (a Warning from receivedWarn on).
func checkBGPSessions(in Inputs) []Finding {
	var out []Finding
	for _, s := range in.BGPSessions {
		who := s.Node + " to " + s.Peer
		if s.Address != "" {
			who += " (" + s.Address + ")"
		}
		if !s.Established {
			msg := "the BGP session " + who + " is " + s.State
			if s.Reason != "" {
				msg += " (" + s.Reason + ")"
			}
			msg += ": that router gets none of " + s.Node + "'s routes"
			fix := s.Message
			if fix == "" {
				fix = "see mooring status -o wide (BGP SESSIONS) and the agent's log on " + s.Node
			}
			out = append(out, Finding{Severity: Problem, Node: s.Node, Object: "BGPPeer/" + s.Peer, Message: msg, Fix: fix})
		}
		if s.Received >= receivedWarn {
			out = append(out, Finding{Severity: Warning, Node: s.Node, Object: "BGPPeer/" + s.Peer,
				Message: fmt.Sprintf("the router sends %s %d prefixes; Mooring uses none and its agent keeps each in memory (~%.0f MiB here)",
					who, s.Received, float64(s.Received)*receivedKiB/1024),
				Fix: "configure the router to send the nodes nothing (an outbound policy that denies every route; docs/bgp.md, Configuring the router)"})
		}
	}
	return out
}
