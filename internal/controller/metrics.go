package controller

import (
	"math/big"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/mooringlb/mooring/internal/buildinfo"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// metrics are the controller's own series. Gauges are recomputed by the
// pool status writer (at most once per PoolStatusInterval), so they lag the
// allocator by at most that long.
type metrics struct {
	poolAddrs   *prometheus.GaugeVec
	pending     *prometheus.GaugeVec
	conflicting prometheus.Gauge
	allocations prometheus.Counter
	outside     prometheus.Gauge
	adoptOnly   *prometheus.GaugeVec
	buildInfo   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	m := &metrics{
		poolAddrs: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooring_lbipam_pool_addresses",
			Help: "Addresses of a LoadBalancerIPPool by family and state (total, used, free). IPv6 totals beyond 2^53 are approximate.",
		}, []string{"pool", "family", "state"}),
		pending: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooring_lbipam_services_pending",
			Help: "LoadBalancer Services with at least one address family pending, by the reason of the first.",
		}, []string{"reason"}),
		conflicting: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_lbipam_pools_conflicting",
			Help: "LoadBalancerIPPools that overlap an older pool.",
		}),
		allocations: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_lbipam_allocations_total",
			Help: "Addresses newly assigned to Services.",
		}),
		outside: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_lbipam_services_held_outside_pools",
			Help: "LoadBalancer Services keeping an address that lies outside every pool (or held twice); each also carries a warning condition.",
		}),
		adoptOnly: f.NewGaugeVec(prometheus.GaugeOpts{
			Name: "mooring_lbipam_adopt_only_services",
			Help: "Services without a loadBalancerClass that --adopt-only leaves to another controller, by state: in_pools (every held address lies in a pool), outside_pools, no_address. Switch --adopt-only off when outside_pools is 0.",
		}, []string{"state"}),
		buildInfo: f.NewGauge(prometheus.GaugeOpts{
			Name:        "mooring_controller_build_info",
			Help:        "Always 1; the labels say which build runs: the version and commit `mooring version` and /version report.",
			ConstLabels: buildinfo.Get().Labels(),
		}),
	}
	m.buildInfo.Set(1)
	return m
}

// observe replaces the gauges with a fresh snapshot.
func (m *metrics) observe(reports []lbipam.PoolReport, pending map[lbipam.Reason]int, warned int) {
	m.poolAddrs.Reset()
	conflicting := 0
	for _, r := range reports {
		if len(r.ConflictsWith) > 0 {
			conflicting++
		}
		for fam, u := range map[string]lbipam.Usage{"ipv4": r.IPv4, "ipv6": r.IPv6} {
			if u.Total == nil || u.Total.Sign() == 0 {
				continue
			}
			m.poolAddrs.WithLabelValues(r.Name, fam, "total").Set(toFloat(u.Total))
			m.poolAddrs.WithLabelValues(r.Name, fam, "used").Set(toFloat(u.Used))
			m.poolAddrs.WithLabelValues(r.Name, fam, "free").Set(toFloat(u.Free))
		}
	}
	m.conflicting.Set(float64(conflicting))
	m.pending.Reset()
	for reason, n := range pending {
		m.pending.WithLabelValues(string(reason)).Set(float64(n))
	}
	m.outside.Set(float64(warned))
}

// observeAdopted replaces the adopt-only gauge.
func (m *metrics) observeAdopted(byState map[string]int) {
	for st, n := range byState {
		m.adoptOnly.WithLabelValues(st).Set(float64(n))
	}
}

func toFloat(x *big.Int) float64 {
	if x == nil {
		return 0
	}
	f, _ := new(big.Float).SetInt(x).Float64()
	return f
}
