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

// routeTracer stamps each bench Service's route the moment the BGP lab
// router's kernel IPv4 table (what zebra installed and the router forwards
// with) first holds its address over paths next hops (one per node: every
// agent advertises it), during a bench (TestBenchLabServices with
// envBenchBGP). The stamps come from the kernel's route notifications
// (RTM_NEWROUTE, read as they arrive); the table is also read whole every
// 2 s over netlink (a few ms at 10,000 routes), which counts the routes
// that are whole and stamps any route whose notification was lost (a
// full socket buffer) at the end of that read: up to 2 s late, an upper
// bound, counted in String. Reading zebra's RIB as vtysh JSON instead took
// 2.7 s a read at 10,000 routes and loaded the machine the bench measures.
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
	// notified: routes first stamped by a notification; late: routes a
	// read found whole before a notification said so; lost: the
	// subscription's errors (ENOBUFS: notifications dropped).
	notified, late, lost int
	lostErr              error
}

func (tr *tracer) watchRouter(ctx context.Context, t *testing.T, router *netlab.Host, paths int) *routeTracer {
	t.Helper()
	nl, err := router.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	rt := &routeTracer{tr: tr, paths: paths}
	updates, stop := make(chan netlink.RouteUpdate, 1<<16), make(chan struct{})
	ns := router.NS()
	if err := netlink.RouteSubscribeWithOptions(updates, stop, netlink.RouteSubscribeOptions{
		Namespace: &ns, ReceiveBufferSize: 32 << 20, ReceiveBufferForceSize: true,
		ErrorCallback: func(err error) {
			if ctx.Err() != nil {
				return // the subscription's socket closing at the end
			}
			rt.mu.Lock()
			rt.lost++
			rt.lostErr = err
			rt.mu.Unlock()
		},
	}); err != nil {
		t.Fatal(err)
	}
	go func() {
		<-ctx.Done()
		close(stop)
	}()
	go func() {
		for u := range updates {
			if u.Type != unix.RTM_NEWROUTE || u.Table != unix.RT_TABLE_MAIN {
				continue
			}
			s := rt.benchRoute(u.Route)
			if s == nil {
				continue
			}
			if tr.set(s, routeField, time.Now()) {
				rt.mu.Lock()
				rt.notified++
				rt.mu.Unlock()
			}
		}
	}()
	go func() {
		defer nl.Close()
		for ctx.Err() == nil {
			t0 := time.Now()
			routes, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
			took := time.Since(t0)
			seen := time.Now()
			whole, late := 0, 0
			for _, r := range routes {
				s := rt.benchRoute(r)
				if s == nil {
					continue
				}
				whole++
				if tr.set(s, routeField, seen) {
					late++
				}
			}
			rt.mu.Lock()
			rt.late += late
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

func routeField(s *svcTrace) *time.Time { return &s.route }

// benchRoute is the bench Service whose address r routes over rt.paths
// next hops, or nil.
func (rt *routeTracer) benchRoute(r netlink.Route) *svcTrace {
	if r.Dst == nil || len(r.MultiPath) != rt.paths {
		return nil
	}
	ones, bits := r.Dst.Mask.Size()
	a, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok || ones != bits {
		return nil
	}
	return rt.tr.byAddr[a.Unmap()]
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
	s += fmt.Sprintf("; %d routes stamped by the kernel's notification, %d by a read (up to 2 s late)", rt.notified, rt.late)
	if rt.lost > 0 {
		s += fmt.Sprintf("; %d subscription errors, last: %v", rt.lost, rt.lostErr)
	}
	if rt.err != nil {
		s += fmt.Sprintf("; last read error: %v", rt.err)
	}
	return s
}
