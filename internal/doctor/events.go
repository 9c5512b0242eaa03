package doctor

import (
	"fmt"
	"strings"
)

// Event reasons the agent records (api/v1alpha1 wellknown.go).
const (
	ReasonStaleLocalAddress = "StaleLocalAddress"
	ReasonSplitBrain        = "L2SplitBrain"
)

// checkStale: a node holding an announced address on a local interface
// with arp_ignore=0 is a second ARP responder (the kube-ipvs0 trap).
func checkStale(in Inputs) []Finding {
	return agentReports(in, ReasonStaleLocalAddress, func(m *AgentMetrics) float64 { return m.StaleLocal },
		"stale local copy of an announced address",
		"remove the address from the node's interface (a leftover kube-ipvs0?) or set net.ipv4.conf.all.arp_ignore=1 on the node")
}

// checkSplitBrain: another MAC answered for an address a node announces.
func checkSplitBrain(in Inputs) []Finding {
	return agentReports(in, ReasonSplitBrain, func(m *AgentMetrics) float64 { return m.SplitBrain },
		"split brain: another MAC answers for an announced address",
		"find the other responder: a stale local address (kube-ipvs0, arp_ignore=0) or another announcer (MetalLB speaker, kube-vip) on the segment")
}

// agentReports tells now from then. What the agents count now (their
// gauge) is current; so is an Event whose Service's address the ARP/NDP
// audit sees answered by more than one MAC now. Every other Event says
// only that the problem was seen once: it is history, shown with why no
// live check confirms it, and never makes doctor exit 1.
func agentReports(in Inputs, reason string, gauge func(*AgentMetrics) float64, what, fix string) []Finding {
	byNode := map[string][]Event{}
	var order []string
	for _, e := range newestPerService(in.Events, reason) {
		if _, ok := byNode[e.Node]; !ok {
			order = append(order, e.Node)
		}
		byNode[e.Node] = append(byNode[e.Node], e)
	}
	nodes := map[string]Node{}
	var out []Finding
	for _, n := range in.Nodes {
		nodes[n.Name] = n
		if n.Metrics == nil {
			continue
		}
		v := gauge(n.Metrics)
		if v == 0 {
			continue
		}
		if len(byNode[n.Name]) == 0 {
			out = append(out, Finding{Severity: Problem, Node: n.Name,
				Message: fmt.Sprintf("%s: the agent on %s reports %v such address(es) now", what, n.Name, v), Fix: fix})
			continue
		}
		for _, e := range byNode[n.Name] {
			out = append(out, Finding{Severity: Problem, Node: e.Node, Object: "Service/" + e.Service,
				Message: fmt.Sprintf("%s (Event %s, %s ago; the agent on %s counts %v now): %s", what, e.Reason, e.Age, n.Name, v, e.Message), Fix: fix})
		}
		delete(byNode, n.Name)
	}
	for _, node := range order {
		for _, e := range byNode[node] {
			out = append(out, eventNowOrThen(in, nodes, e, what, fix))
		}
	}
	return out
}

// newestPerService keeps, of the Events of reason, the newest per node
// and Service (an agent records one per transition), in their order.
func newestPerService(evs []Event, reason string) []Event {
	type key struct{ node, svc string }
	at := map[key]int{}
	var out []Event
	for _, e := range evs {
		if e.Reason != reason {
			continue
		}
		k := key{e.Node, e.Service}
		if i, ok := at[k]; ok {
			if e.Time.After(out[i].Time) {
				out[i] = e
			}
			continue
		}
		at[k] = len(out)
		out = append(out, e)
	}
	return out
}

// eventNowOrThen is one Event that no agent gauge counts now: current if
// the audit confirms it, else history.
func eventNowOrThen(in Inputs, nodes map[string]Node, e Event, what, fix string) Finding {
	f := Finding{Node: e.Node, Object: "Service/" + e.Service, Fix: fix}
	if split := auditSplit(in.Audit, e.Service); split != "" {
		f.Severity = Problem
		f.Message = fmt.Sprintf("%s (Event %s, %s ago), seen now by the ARP/NDP audit: %s; the Event: %s", what, e.Reason, e.Age, split, e.Message)
		return f
	}
	var why []string
	switch n, ok := nodes[e.Node]; {
	case !ok:
		why = append(why, "no node "+e.Node+" now")
	case n.Metrics != nil:
		why = append(why, "the agent on "+e.Node+" counts none now")
	case n.MetricsErr != "":
		why = append(why, "the agent's metrics on "+e.Node+" cannot be read")
	default:
		why = append(why, "the agents' metrics were not read")
	}
	switch a := in.Audit; {
	case a == nil || a.Skipped != "":
		why = append(why, "no ARP/NDP audit ran (--interface)")
	case len(auditOf(a, e.Service)) > 0:
		why = append(why, "the ARP/NDP audit sees at most one responder for its addresses")
	}
	f.Severity = History
	f.Message = fmt.Sprintf("history: %s (Event %s, %s ago), not seen now (%s): %s", what, e.Reason, e.Age, strings.Join(why, "; "), e.Message)
	return f
}

// auditOf is the audit's entries for a Service's addresses.
func auditOf(a *Audit, svc string) []AuditAddr {
	if a == nil {
		return nil
	}
	var out []AuditAddr
	for _, x := range a.Addrs {
		if x.Service == svc {
			out = append(out, x)
		}
	}
	return out
}

// auditSplit describes the Service's addresses that more than one MAC
// answers now, "" for none.
func auditSplit(a *Audit, svc string) string {
	var out []string
	for _, x := range auditOf(a, svc) {
		if len(x.Responders) > 1 {
			out = append(out, x.Addr.String()+" answered by "+responders(x.Responders))
		}
	}
	return strings.Join(out, "; ")
}

// responders is "MAC (node), MAC (a host that is no node)".
func responders(rs []Responder) string {
	var out []string
	for _, r := range rs {
		node := r.Node
		if node == "" {
			node = "a host that is no node"
		}
		out = append(out, r.MAC+" ("+node+")")
	}
	return strings.Join(out, ", ")
}
