package agent

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/mooringlb/mooring/internal/agent/status"
)

// metrics are the decision loop's own; every room registers its own on the
// same registerer (the responder: requests, replies, gratuitous;
// membership: live members; safety, eligibility, snapshot, eviction).
type metrics struct {
	ownershipChanges *prometheus.CounterVec
	owned            prometheus.Gauge
	announced        prometheus.Gauge
	decisions        prometheus.Histogram
	policyProblems   prometheus.Gauge
	writes           *status.Writes
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		ownershipChanges: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_agent_ownership_changes_total",
			Help: "Addresses this node started (gained) or stopped (lost) announcing.",
		}, []string{"change"}),
		owned: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_addresses_owned",
			Help: "Addresses this node announces.",
		}),
		announced: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_addresses_announced",
			Help: "Addresses some live node announces, as this node computes it.",
		}),
		decisions: f.NewHistogram(prometheus.HistogramOpts{
			Name:    "mooring_agent_decision_seconds",
			Help:    "Time to recompute the announcement table (on every relevant change).",
			Buckets: prometheus.ExponentialBuckets(0.0001, 4, 8),
		}),
		policyProblems: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_policy_problems",
			Help: "Problems found in L2AnnouncementPolicies (each such policy is skipped).",
		}),
		writes: status.NewWrites(reg),
	}
}
