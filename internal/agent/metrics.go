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
	handOvers        prometheus.Counter
	handOverExpired  prometheus.Counter
	letGo            prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		handOvers: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_hand_overs_total",
			Help: "Addresses this node kept answering after its decision gave them to a returning peer, until that peer took them (make before break).",
		}),
		handOverExpired: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_hand_overs_expired_total",
			Help: "Hand-overs this node ended because the returning peer had not taken the address within the maximum take wait (it lets the address go).",
		}),
		letGo: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_let_go_total",
			Help: "Addresses this node, no longer serving (its agent stopping, or its Node excluded by the label), kept answering with the new owner's MAC while that peer took them (make before break).",
		}),
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
