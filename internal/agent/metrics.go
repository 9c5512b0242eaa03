package agent

import "github.com/prometheus/client_golang/prometheus"

// metrics are the agent's own; the responder (requests, replies,
// gratuitous) and membership (live members) register theirs on the same
// registerer.
type metrics struct {
	ownershipChanges *prometheus.CounterVec
	owned            prometheus.Gauge
	announced        prometheus.Gauge
	decisions        prometheus.Histogram
	policyProblems   prometheus.Gauge
	stale            prometheus.Gauge
	splitBrain       prometheus.Gauge
	splitBrainTotal  prometheus.Counter
	apiWrites        *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		ownershipChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_agent_ownership_changes_total",
			Help: "Addresses this node started (gained) or stopped (lost) announcing.",
		}, []string{"change"}),
		owned: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_addresses_owned",
			Help: "Addresses this node announces.",
		}),
		announced: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_addresses_announced",
			Help: "Addresses some live node announces, as this node computes it.",
		}),
		decisions: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "mooring_agent_decision_seconds",
			Help:    "Time to recompute the announcement table (on every relevant change).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
		policyProblems: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_policy_problems",
			Help: "Problems found in L2AnnouncementPolicies (each such policy is skipped).",
		}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_stale_local_addresses",
			Help: "Announced addresses configured on this node where its kernel answers ARP/NDP by itself (arp_ignore=0): a second responder.",
		}),
		splitBrain: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_split_brain_addresses",
			Help: "Addresses this node announces for which another MAC also answered at the last probe.",
		}),
		splitBrainTotal: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_split_brain_detections_total",
			Help: "Times a probe found another MAC answering for an address this node announces.",
		}),
		apiWrites: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_agent_api_writes_total",
			Help: "Writes to the API server by kind (annotation, event, policy_status) and result; nothing periodic.",
		}, []string{"kind", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.ownershipChanges, m.owned, m.announced, m.decisions, m.policyProblems,
			m.stale, m.splitBrain, m.splitBrainTotal, m.apiWrites)
	}
	return m
}

func (m *metrics) write(kind string, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	m.apiWrites.WithLabelValues(kind, res).Inc()
}
