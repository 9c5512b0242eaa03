package memory

import (
	"context"
	"log/slog"
	"os"
	"runtime/debug"
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
