package memory

import (
	"io"
	"log/slog"
	"math"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestUnderPressure(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name        string
		s           limitSample
		was         bool
		lastLimiter uint64
		want        bool
	}{
		{"no limit", limitSample{live: 500 * mib, limit: math.MaxInt64}, false, 0, false},
		{"limit zero (unreadable)", limitSample{live: 500 * mib}, false, 0, false},
		{"half the limit", limitSample{live: 24 * mib, limit: 48 * mib}, false, 0, false},
		{"89 %: not yet", limitSample{live: 42 * mib, limit: 48 * mib}, false, 0, false},
		{"90 %: pressure", limitSample{live: 44 * mib, limit: 48 * mib}, false, 0, true},
		{"BGP at 10,000 under the chart's 48 MiB", limitSample{live: 51 * mib, limit: 48 * mib}, false, 0, true},
		{"85 % while under pressure: stays", limitSample{live: 41 * mib, limit: 48 * mib}, true, 0, true},
		{"79 % while under pressure: leaves", limitSample{live: 38 * mib, limit: 48 * mib}, true, 0, false},
		{"85 % and the collector capped since the last check", limitSample{live: 41 * mib, limit: 48 * mib, limiterCycle: 7}, false, 6, true},
		{"85 %, capped long ago only", limitSample{live: 41 * mib, limit: 48 * mib, limiterCycle: 7}, false, 7, false},
		{"capped with little live (a burst of garbage)", limitSample{live: 20 * mib, limit: 48 * mib, limiterCycle: 7}, false, 6, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := underPressure(tc.s, tc.was, tc.lastLimiter); got != tc.want {
				t.Fatalf("underPressure(%+v, %v, %d) = %v, want %v", tc.s, tc.was, tc.lastLimiter, got, tc.want)
			}
		})
	}
}

// TestLimitWatchSeesTheRealRuntime: with a real heap over a real soft
// limit (this process's), the gauge says so; with the limit lifted, it
// clears.
func TestLimitWatchSeesTheRealRuntime(t *testing.T) {
	old := debug.SetMemoryLimit(-1)
	t.Cleanup(func() { debug.SetMemoryLimit(old) })
	reg := prometheus.NewRegistry()
	w := NewLimitWatch(reg, slog.New(slog.NewTextHandler(io.Discard, nil)))
	keep := make([][]byte, 0, 64)
	for range 64 { // 64 MiB the collector must keep
		b := make([]byte, 1<<20)
		b[0] = 1
		keep = append(keep, b)
	}
	runtime.GC()
	debug.SetMemoryLimit(32 << 20)
	if !w.Check() {
		t.Fatalf("64 MiB live under a 32 MiB limit: no pressure (%+v)", readLimit())
	}
	if got := gauge(t, reg); got != 1 {
		t.Fatalf("mooring_agent_memory_limit_pressure = %v, want 1", got)
	}
	debug.SetMemoryLimit(math.MaxInt64)
	if w.Check() {
		t.Fatalf("no limit: still pressure (%+v)", readLimit())
	}
	if got := gauge(t, reg); got != 0 {
		t.Fatalf("mooring_agent_memory_limit_pressure = %v, want 0", got)
	}
	runtime.KeepAlive(keep)
}

// gauge is mooring_agent_memory_limit_pressure as reg serves it.
func gauge(t *testing.T, reg *prometheus.Registry) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "mooring_agent_memory_limit_pressure" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatal("mooring_agent_memory_limit_pressure not registered")
	return 0
}
