package bgpagent

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// The BGP metrics an operator alerts on (MetalLB's metallb_bgp_session_up
// and metallb_bgp_announced_prefixes_total, Cilium's BGP session state).
// They are read from the sessions the status loop last listed (every
// second), never from GoBGP at scrape time: a scrape costs nothing.
var (
	descSessionUp = prometheus.NewDesc("mooring_bgp_session_up",
		"1 while the node's BGP session with the peer is Established, else 0.", []string{"peer", "address"}, nil)
	descSessionDown = prometheus.NewDesc("mooring_bgp_session_down_reason",
		"1 for why a session that is not Established is not (the BGPSpeaker's reason, e.g. AuthFailure, MaxPrefixesExceeded); absent while it is up.",
		[]string{"peer", "address", "reason"}, nil)
	descEstablished = prometheus.NewDesc("mooring_bgp_session_established_timestamp_seconds",
		"When the session last came up, Unix seconds; absent while it is down (a change means the session was reset).", []string{"peer", "address"}, nil)
	descSent = prometheus.NewDesc("mooring_bgp_prefixes_advertised",
		"Prefixes the node advertises on the session (recounted at most every 5 s).", []string{"peer", "address"}, nil)
	descReceived = prometheus.NewDesc("mooring_bgp_prefixes_received",
		"Prefixes the router sent the node on the session; the node uses none and keeps each in memory (maxReceivedPrefixes bounds them).", []string{"peer", "address"}, nil)
	descBFDUp = prometheus.NewDesc("mooring_bgp_bfd_up",
		"1 while the session's BFD is Up, else 0; absent for a peer without a BFD profile.", []string{"peer", "address"}, nil)
)

// metrics is the collector of the sessions last listed.
type metrics struct {
	mu       sync.Mutex
	sessions []bgpspeaker.SessionState
}

func (m *metrics) set(s []bgpspeaker.SessionState) {
	m.mu.Lock()
	m.sessions = s
	m.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSessionUp, descSessionDown, descEstablished, descSent, descReceived, descBFDUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.mu.Lock()
	sessions := m.sessions
	m.mu.Unlock()
	for _, s := range sessions {
		addr := ""
		if s.Address.IsValid() {
			addr = s.Address.String()
		}
		up := s.State == bgpspeaker.StateEstablished
		ch <- prometheus.MustNewConstMetric(descSessionUp, prometheus.GaugeValue, boolValue(up), s.Peer, addr)
		if !up && s.Reason != "" {
			ch <- prometheus.MustNewConstMetric(descSessionDown, prometheus.GaugeValue, 1, s.Peer, addr, s.Reason)
		}
		if up && !s.Established.IsZero() {
			ch <- prometheus.MustNewConstMetric(descEstablished, prometheus.GaugeValue, float64(s.Established.Unix()), s.Peer, addr)
		}
		ch <- prometheus.MustNewConstMetric(descSent, prometheus.GaugeValue, float64(s.PrefixesSent), s.Peer, addr)
		ch <- prometheus.MustNewConstMetric(descReceived, prometheus.GaugeValue, float64(s.PrefixesReceived), s.Peer, addr)
		if s.BFD != "" && s.BFD != bgpspeaker.BFDOff {
			ch <- prometheus.MustNewConstMetric(descBFDUp, prometheus.GaugeValue, boolValue(s.BFD == bgpspeaker.BFDUp), s.Peer, addr)
		}
	}
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
