package memory

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"runtime/metrics"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"k8s.io/utils/clock"
)

// A soft memory limit (GOMEMLIMIT, the chart's agent.goMemLimit) below
// what the agent's heap needs is a trap: the runtime then collects all
// the time, up to half the CPU, and the agent answers, decides and
// withdraws late while it looks healthy: at 10,000 Services with BGP
// (~24 MiB live) a 32 MiB limit cost the agents 7.5 times the CPU; the
// chart's 48 MiB holds there (docs/bgp.md, "At 10,000 Services").
// WatchLimit notices it.

// limitCheckEvery paces WatchLimit's reads (a few runtime/metrics samples).
const limitCheckEvery = 15 * time.Second

// Thresholds of pressure as a share of the limit: entering at 90 % of
// it, leaving below 80 %, so that a heap near the line does not flap.
const (
	pressureEnter = 0.9
	pressureLeave = 0.8
)

// limitSample is what one check reads from the runtime.
type limitSample struct {
	live  uint64 // /gc/heap/live:bytes: the heap the last GC kept
	limit uint64 // the soft limit; math.MaxInt64: none
	// limiterCycle is /gc/limiter/last-enabled:gc-cycle: the last GC
	// cycle in which the runtime capped the collector's CPU (0: never).
	limiterCycle uint64
}

// limited reports whether a soft limit is set (GOMEMLIMIT unset reads as
// math.MaxInt64).
func (s limitSample) limited() bool { return s.limit != 0 && s.limit < math.MaxInt64 }

// underPressure reports whether the heap is at the soft limit now, given
// whether it was at the last check and the limiter cycle seen then: the
// live heap at 90 % of the limit or more, or at 80 % with the runtime
// having had to cap the collector since the last check (below 80 % to
// leave). Pure.
func underPressure(s limitSample, was bool, lastLimiter uint64) bool {
	if !s.limited() {
		return false
	}
	share := float64(s.live) / float64(s.limit)
	if was || s.limiterCycle > lastLimiter {
		// A capped collector with a heap this near the limit is the
		// limit's doing, not a burst of garbage (start-up's lists).
		return share >= pressureLeave
	}
	return share >= pressureEnter
}

var limitSamples = []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/gc/limiter/last-enabled:gc-cycle"}}

func readLimit() limitSample {
	ss := make([]metrics.Sample, len(limitSamples))
	copy(ss, limitSamples)
	metrics.Read(ss)
	var s limitSample
	if ss[0].Value.Kind() == metrics.KindUint64 {
		s.live = ss[0].Value.Uint64()
	}
	if ss[1].Value.Kind() == metrics.KindUint64 {
		s.limiterCycle = ss[1].Value.Uint64()
	}
	s.limit = uint64(debug.SetMemoryLimit(-1)) // -1 reads it
	return s
}

// LimitWatch reports a soft memory limit the agent's heap presses on: the
// gauge mooring_agent_memory_limit_pressure (which mooring doctor reads)
// and a warning naming the fix, once per episode.
type LimitWatch struct {
	gauge   prometheus.Gauge
	log     *slog.Logger
	read    func() limitSample
	was     bool
	limiter uint64
}

// NewLimitWatch registers the gauge with reg.
func NewLimitWatch(reg prometheus.Registerer, log *slog.Logger) *LimitWatch {
	return &LimitWatch{log: log, read: readLimit, limiter: readLimit().limiterCycle,
		gauge: promauto.With(reg).NewGauge(prometheus.GaugeOpts{Name: "mooring_agent_memory_limit_pressure",
			Help: "1 while the Go heap the agent keeps is at its soft memory limit (GOMEMLIMIT; 90 % of it, or the runtime capping the collector's CPU): it collects all the time and serves late. Raise agent.goMemLimit and the memory limit."})}
}

// Check reads the runtime once and reports a change.
func (w *LimitWatch) Check() bool {
	s := w.read()
	now := underPressure(s, w.was, w.limiter)
	w.limiter = s.limiterCycle
	if now != w.was {
		if now {
			w.log.Warn(fmt.Sprintf("the agent's heap is at its soft memory limit (GOMEMLIMIT): %d MiB live of %d MiB; the runtime collects all the time, up to half a core, and the agent serves late: raise the chart's agent.goMemLimit and agent.resources (docs/bgp.md, At 10,000 Services)",
				s.live>>20, s.limit>>20))
		} else {
			w.log.Info("the agent's heap is below its soft memory limit again", "liveMiB", s.live>>20, "limitMiB", s.limit>>20)
		}
	}
	w.was = now
	w.gauge.Set(b2f(now))
	return now
}

// Run checks every limitCheckEvery until ctx ends (nothing to watch
// without a limit).
func (w *LimitWatch) Run(ctx context.Context, clk clock.WithTicker) {
	if !w.read().limited() {
		return
	}
	t := clk.NewTicker(limitCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			w.Check()
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
