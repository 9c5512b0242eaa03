package membership

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	live     prometheus.Gauge
	joins    prometheus.Counter
	failures prometheus.Counter
	leaves   prometheus.Counter
	held     prometheus.Gauge
	refuted  prometheus.Counter
	insecure prometheus.Gauge
}

// newMetrics builds the metrics and registers them on reg (nil: not
// registered).
func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		live: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_members_live",
			Help: "Live members of the agents' gossip cluster as this member sees them, itself included.",
		}),
		joins: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_joins_total",
			Help: "Members seen joining (or coming back).",
		}),
		failures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_failures_total",
			Help: "Members declared dead by failure detection.",
		}),
		leaves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_leaves_total",
			Help: "Members that left gracefully.",
		}),
		held: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_members_held",
			Help: "Members gossip declared failed whose node still answers ARP/NDP, kept live (a stalled agent) for up to the agent-loss timeout.",
		}),
		refuted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_false_failures_total",
			Help: "Members gossip declared failed that came back while their node still answered: a false death that moved nothing.",
		}),
		insecure: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_members_insecure",
			Help: "1 while this member gossips without a key: anyone who reaches its gossip port can join, claim a node's name and spread false deaths (mooring doctor reports it).",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.live, m.joins, m.failures, m.leaves, m.held, m.refuted, m.insecure)
	}
	return m
}
