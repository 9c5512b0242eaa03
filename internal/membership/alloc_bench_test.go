package membership

import (
	"runtime"
	"testing"
	"time"
)

// BenchmarkIdleGossipAlloc reports what three idle members on loopback
// (the agent's probe and gossip intervals, no Services, no churn)
// allocate per member and second: the garbage an idle agent's gossip
// makes the collector chase. One op is one second of gossip.
//
//	go test -run '^$' -bench IdleGossipAlloc -benchtime 10x ./internal/membership/
func BenchmarkIdleGossipAlloc(b *testing.B) {
	ms := startCluster(b, 3)
	time.Sleep(time.Second) // the joins' push/pull and broadcasts settle
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	for b.Loop() {
		time.Sleep(time.Second)
	}
	runtime.ReadMemStats(&after)
	secs := time.Since(start).Seconds()
	b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/secs/float64(len(ms))/1024, "KiB/s/member")
	b.ReportMetric(float64(after.Mallocs-before.Mallocs)/secs/float64(len(ms)), "allocs/s/member")
}
