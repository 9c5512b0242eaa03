package lab_test

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/netlab"
)

// routeTracer reads the BGP lab router's kernel IPv4 table (what zebra
// installed and the router forwards with) every 2 s during a bench
// (TestBenchLabServices with envBenchBGP) and stamps each bench Service's
// route the first time the kernel holds its address over paths next hops
// (one per node: every agent advertises it). A stamp is the end of the
// read that first saw it: up to 2 s late, an upper bound. The table is
// read over netlink (a few ms at 10,000 routes): reading zebra's RIB as
// vtysh JSON took 2.7 s a read at 10,000 routes and loaded the machine
// the bench measures.
type routeTracer struct {
	tr    *tracer
	paths int

	mu       sync.Mutex
	reads    int
	readTime time.Duration // summed over the reads
	slowest  time.Duration
	largest  int // routes in the largest read
	whole    int // bench addresses over paths next hops, last read
	err      error
}

func (tr *tracer) watchRouter(ctx context.Context, t *testing.T, router *netlab.Host, paths int) *routeTracer {
	t.Helper()
	nl, err := router.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	rt := &routeTracer{tr: tr, paths: paths}
	go func() {
		defer nl.Close()
		for ctx.Err() == nil {
			t0 := time.Now()
			routes, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
			took := time.Since(t0)
			seen := time.Now()
			whole := 0
			for _, r := range routes {
				if r.Dst == nil || len(r.MultiPath) != paths {
					continue
				}
				ones, bits := r.Dst.Mask.Size()
				a, ok := netip.AddrFromSlice(r.Dst.IP)
				if !ok || ones != bits {
					continue
				}
				s := tr.byAddr[a.Unmap()]
				if s == nil {
					continue
				}
				whole++
				tr.set(s, func(s *svcTrace) *time.Time { return &s.route }, seen)
			}
			rt.mu.Lock()
			rt.reads++
			rt.readTime += took
			rt.slowest = max(rt.slowest, took)
			rt.largest = max(rt.largest, len(routes))
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
	s := fmt.Sprintf("router's kernel table read %d times (mean %v, slowest %v, up to %d routes)", rt.reads,
		mean.Round(time.Microsecond), rt.slowest.Round(time.Microsecond), rt.largest)
	if rt.err != nil {
		s += fmt.Sprintf("; last read error: %v", rt.err)
	}
	return s
}
