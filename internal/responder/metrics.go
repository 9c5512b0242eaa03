package responder

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Family label values.
const (
	familyIPv4 = "ipv4"
	familyIPv6 = "ipv6"
)

type metrics struct {
	requests   *prometheus.CounterVec
	replies    *prometheus.CounterVec
	gratuitous *prometheus.CounterVec
	errors     *prometheus.CounterVec
	interfaces prometheus.Gauge
}

// newMetrics builds the responder's metrics and registers them on reg (nil:
// not registered, for tests and callers that do not export metrics).
func newMetrics(reg prometheus.Registerer) *metrics {
	labels := []string{"family", "interface"}
	f := promauto.With(reg)
	return &metrics{
		requests: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_responder_requests_total",
			Help: "ARP requests and neighbour solicitations seen, by whether the address is owned on that interface.",
		}, append(labels, "owned")),
		replies: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_responder_replies_total",
			Help: "ARP replies and solicited neighbour advertisements sent.",
		}, labels),
		gratuitous: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_responder_gratuitous_total",
			Help: "Gratuitous ARP frames and unsolicited neighbour advertisements sent.",
		}, labels),
		errors: f.NewCounterVec(prometheus.CounterOpts{
			Name: "mooring_responder_errors_total",
			Help: "Failures by operation (open, read, write, join).",
		}, []string{"op"}),
		interfaces: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_responder_interfaces",
			Help: "Interfaces with open listeners.",
		}),
	}
}
