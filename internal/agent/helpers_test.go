package agent

import (
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/eligibility"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// fakeMembers is embedded by richer fakes (the alias names the field).
type fakeMembers = agenttest.Members

// gathered is the value of the metric name (summed over labels) on the
// agent's registry; -1 when it has none.
func gathered(a *Agent, name string) float64 {
	g, ok := a.deps.Registerer.(prometheus.Gatherer)
	if !ok {
		return -1
	}
	mfs, err := g.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		sum := 0.0
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
		return sum
	}
	return -1
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// reconfigured rebuilds the agent's eligibility (and hand-off) after a
// test changed their settings in a.cfg; call it before the first decision.
func reconfigured(a *Agent) *Agent {
	a.elig = eligibility.New(a.cfg.eligibilityConfig(), time.Now(), a.log, nil, a.gossip())
	return a
}
