package memory

import (
	"context"
	"log/slog"
	"os"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"k8s.io/utils/clock"
)

// ReleaseAfterStart calls releaseStartupMemory once, a while after the
// first decision was applied (decided reports it; the initial lists and the
// first full decision are then garbage), and returns.
func ReleaseAfterStart(ctx context.Context, decided func() bool, clk clock.WithTicker, log *slog.Logger) {
	poll := clk.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for !decided() {
		select {
		case <-ctx.Done():
			return
		case <-poll.C():
		}
	}
	select {
	case <-ctx.Done():
		return
	case <-clk.After(releaseDelay):
	}
	n, err := releaseStartupMemory()
	if err != nil {
		log.Warn("releasing start-up memory", "err", err)
		return
	}
	log.Info("released start-up memory", "binaryMappings", n)
}

// releaseDelay lets the first publish and status write finish first.
const releaseDelay = 5 * time.Second

// gcPercent is the agent's GOGC when the environment sets none. Its heap
// is mostly long-lived (the compact store and the decision), so collecting
// at +50 % instead of Go's +100 % costs little CPU and keeps RSS at 10,000
// Services well under 64 MiB (docs/benchmarks.md, "The agent's memory").
const gcPercent = 50

// TuneGC applies gcPercent unless GOGC is set.
func TuneGC() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(gcPercent)
	}
}

// TuneProfiling turns Go's heap profiling off unless the agent serves
// profiles (served: --pprof-addr is set) or GODEBUG sets memprofilerate.
// By default the runtime records the stack of one allocation every 512
// KiB for ever, in a hash table of 179,999 buckets (1.4 MiB, touched page
// by page as stacks are recorded) plus the records: at 10,000 Services an
// agent held 1.6 MiB of them (go_memstats_buck_hash_sys_bytes) that only a
// heap profile reads. Called early in Run: what package initialisation
// sampled before stays.
func TuneProfiling(served bool) {
	if !served && !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
		runtime.MemProfileRate = 0
	}
}
