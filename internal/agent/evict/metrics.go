package evict

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// metrics are fast endpoint eviction's, registered only when it is on.
type metrics struct {
	dead      prometheus.Gauge
	nodes     *prometheus.CounterVec
	pods      prometheus.Counter
	conntrack prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		dead: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_nodes_confirmed_dead",
			Help: "Nodes this agent confirmed dead (gossip lost them and their kernel answers no ARP/NDP) that have not come back.",
		}),
		nodes: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_agent_fast_evictions_total",
			Help: "Confirmed-dead nodes whose pods this agent marked NotReady (evicted), could not (failed, retried) or held back by --fast-eviction-max-share (limited).",
		}, []string{"result"}),
		pods: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_fast_eviction_pods_total",
			Help: "Pods this agent marked NotReady because their node was confirmed dead.",
		}),
		conntrack: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_conntrack_entries_deleted_total",
			Help: "Conntrack entries from a LoadBalancer address to a dead node's endpoints that this agent deleted on its node.",
		}),
	}
}
