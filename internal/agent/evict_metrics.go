package agent

import "github.com/prometheus/client_golang/prometheus"

// evictMetrics are fast endpoint eviction's (evict.go), registered only
// when it is on.
type evictMetrics struct {
	dead      prometheus.Gauge
	nodes     *prometheus.CounterVec
	pods      prometheus.Counter
	conntrack prometheus.Counter
}

func newEvictMetrics(reg prometheus.Registerer) *evictMetrics {
	m := &evictMetrics{
		dead: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_agent_nodes_confirmed_dead",
			Help: "Nodes this agent confirmed dead (gossip lost them and their kernel answers no ARP/NDP) that have not come back.",
		}),
		nodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_agent_fast_evictions_total",
			Help: "Confirmed-dead nodes whose pods this agent marked NotReady (evicted), could not (failed, retried) or held back by --fast-eviction-max-share (limited).",
		}, []string{"result"}),
		pods: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_fast_eviction_pods_total",
			Help: "Pods this agent marked NotReady because their node was confirmed dead.",
		}),
		conntrack: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "mooring_agent_conntrack_entries_deleted_total",
			Help: "Conntrack entries from a LoadBalancer address to a dead node's endpoints that this agent deleted on its node.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.dead, m.nodes, m.pods, m.conntrack)
	}
	return m
}
