package doctor

import (
	"fmt"
	"maps"
	"slices"
	"strings"
)

// checkDataPlane (seed 004: "Ready, no ERROR" is not network health, and a
// warning loop on one node points at the cause): an agent whose /readyz
// fails now, or whose data-plane steps are failing now, is a problem named
// by node, step and counter; steps that failed since the agent started
// but not now are a warning.
func checkDataPlane(in Inputs) []Finding {
	var out []Finding
	for _, n := range in.Nodes {
		r, m := n.Readiness, n.Metrics
		notReady := r != nil && !r.Ready
		holding := notReady && len(r.Reasons) > 0 && !slices.ContainsFunc(r.Reasons, func(s string) bool { return !strings.HasPrefix(s, "holding down") })
		var failing []string
		if m != nil {
			failing = m.StepsFailing
		}
		steps := stepCounters(m)
		switch {
		case (notReady && !holding) || len(failing) > 0:
			msg := "the agent on " + n.Name + " is not ready now"
			if r == nil || r.Ready {
				msg = "the agent on " + n.Name + " fails data-plane steps now: " + strings.Join(failing, ", ")
			} else if len(r.Reasons) > 0 {
				msg += ": " + strings.Join(r.Reasons, "; ")
			}
			if steps != "" {
				msg += "; failures since it started: " + steps
			}
			out = append(out, Finding{Severity: Problem, Node: n.Name, Object: "agent/" + n.Name, Message: msg,
				Fix: "read the agent's log on " + n.Name + " (each failure is logged and retried); a step failing on one node only points at that node: its kernel, sysctls (net.core.optmem_max for the responder's socket filter), interfaces"})
		case holding:
			out = append(out, Finding{Severity: Info, Node: n.Name, Object: "agent/" + n.Name,
				Message: "the agent on " + n.Name + " is holding down after a restart: " + strings.Join(r.Reasons, "; "),
				Fix:     "nothing to do: run doctor again once its --hold-down is over; if it still holds down, read its log"})
		case steps != "":
			out = append(out, Finding{Severity: Warning, Node: n.Name, Object: "agent/" + n.Name,
				Message: "the agent on " + n.Name + " failed data-plane steps since it started, none now: " + steps,
				Fix:     "read the agent's log on " + n.Name + "; compare with the other nodes: a count on one node only points at that node"})
		}
	}
	return out
}

// stepCounters is `step (series = value)` for every step that failed.
func stepCounters(m *AgentMetrics) string {
	if m == nil {
		return ""
	}
	var out []string
	for _, step := range slices.Sorted(maps.Keys(m.StepFailures)) {
		if c := m.StepFailures[step]; c.Value > 0 {
			out = append(out, fmt.Sprintf("%s (%s = %v)", step, c.Series, c.Value))
		}
	}
	return strings.Join(out, ", ")
}

// checkMetricsReach: an agent whose metrics cannot be read is a finding
// of its own, shown by default. A warning, not a problem: it says doctor
// could not look, not that it saw something broken — and alerting on the
// exit code must not fire for a blocked port (a firewall, a
// NetworkPolicy, doctor run from outside the nodes' network) on a healthy
// cluster. What it hides is said: the agent's Events then read as history
// unless the ARP/NDP audit confirms them.
func checkMetricsReach(in Inputs) []Finding {
	var out []Finding
	for _, n := range in.Nodes {
		if n.Metrics != nil || n.MetricsErr == "" {
			continue
		}
		out = append(out, Finding{Severity: Warning, Node: n.Name, Object: "agent/" + n.Name,
			Message: fmt.Sprintf("agent metrics unreachable on %s (%s): its current stale-address, split-brain and data-plane counts are unknown, so its Events show as history unless the ARP/NDP audit sees them now", n.Name, n.MetricsErr),
			Fix:     "let doctor reach the agents' metrics port on the nodes' InternalIPs (a firewall or NetworkPolicy in the way?) or pass --agent-metrics-port; --interface adds a live ARP/NDP check"})
	}
	return out
}
