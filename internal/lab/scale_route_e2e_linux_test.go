package lab_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/frr"
)

// routeTracer reads the BGP lab router's IPv4 RIB every 2 s during a bench
// (TestBenchLabServices with envBenchBGP) and stamps each bench Service's
// route the first time zebra holds its address over paths FIB next hops
// (one per node: every agent advertises it). A stamp is the end of the read
// that first saw it: up to 2 s plus one read late, an upper bound.
type routeTracer struct {
	tr    *tracer
	paths int

	mu       sync.Mutex
	reads    int
	readTime time.Duration // summed over the reads
	slowest  time.Duration
	largest  int // routes in the largest RIB read
	whole    int // bench addresses over paths next hops, last read
	err      error
}

func (tr *tracer) watchRouter(ctx context.Context, t *testing.T, router *frr.Client, paths int) *routeTracer {
	rt := &routeTracer{tr: tr, paths: paths}
	go func() {
		for ctx.Err() == nil {
			t0 := time.Now()
			rib, err := router.RIB(ctx, frr.IPv4)
			took := time.Since(t0)
			seen := time.Now()
			whole := 0
			for p := range rib {
				s := tr.byAddr[p.Addr()]
				if s == nil || !p.IsSingleIP() || len(rib.Installed(p, "bgp")) != paths {
					continue
				}
				whole++
				tr.set(s, func(s *svcTrace) *time.Time { return &s.route }, seen)
			}
			rt.mu.Lock()
			rt.reads++
			rt.readTime += took
			rt.slowest = max(rt.slowest, took)
			rt.largest = max(rt.largest, len(rib))
			if err != nil && ctx.Err() == nil {
				rt.err = err
			}
			if err == nil {
				rt.whole = whole
			}
			rt.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(2 * time.Second):
			}
		}
	}()
	return rt
}

// wait waits up to d for every bench address to be whole at the router
// and returns how many are not.
func (rt *routeTracer) wait(d time.Duration) int {
	for deadline := time.Now().Add(d); ; time.Sleep(500 * time.Millisecond) {
		rt.mu.Lock()
		left := len(rt.tr.all) - rt.whole
		rt.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			return left
		}
	}
}

func (rt *routeTracer) String() string {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	mean := time.Duration(0)
	if rt.reads > 0 {
		mean = rt.readTime / time.Duration(rt.reads)
	}
	s := fmt.Sprintf("router RIB read %d times (mean %v, slowest %v, up to %d routes)", rt.reads,
		mean.Round(time.Millisecond), rt.slowest.Round(time.Millisecond), rt.largest)
	if rt.err != nil {
		s += fmt.Sprintf("; last read error: %v", rt.err)
	}
	return s
}
