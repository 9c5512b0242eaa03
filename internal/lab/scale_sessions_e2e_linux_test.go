package lab_test

import (
	"context"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
)

// envBenchResets is how many times the BGP bench's last phase resets
// every session (default 1).
const envBenchResets = "MOORING_LAB_BENCH_BGP_RESETS"

// sessionsComeUp is the BGP bench's last phase (issue 20: "10,000
// Services → all routes at the router ≤ 15 s after the sessions come
// up"): the router resets every session at once (`clear bgp *`: FRR 8.4
// sends a Hard Reset, so it drops every path the nodes sent, and zebra
// the kernel routes), the agents open them again, and the router's
// kernel table is read every 200 ms until it holds every bench address
// over three next hops again; envBenchResets times. It reports when the
// last session came up (the router's own uptime of each, in ms) and when
// the last route was whole, from the clear and from that session. The
// test fails when the routes did not go (the measurement would be of
// nothing) or did not all come back within a minute.
func sessionsComeUp(t *testing.T, r *lab.Ready, tr *tracer) {
	t.Helper()
	runs, _ := strconv.Atoi(os.Getenv(envBenchResets))
	var afterUp, afterClear []time.Duration
	for i := range max(runs, 1) {
		up, all := resetSessions(t, r, tr, i+1)
		afterUp, afterClear = append(afterUp, all-up), append(afterClear, all)
	}
	slices.Sort(afterUp)
	slices.Sort(afterClear)
	t.Logf("BENCH sessions, %d resets: all %d routes back after the last session came up p50 %v, max %v; after the clear p50 %v, max %v",
		len(afterUp), len(tr.all), afterUp[len(afterUp)/2].Round(time.Millisecond), afterUp[len(afterUp)-1].Round(time.Millisecond),
		afterClear[len(afterClear)/2].Round(time.Millisecond), afterClear[len(afterClear)-1].Round(time.Millisecond))
}

// resetSessions is one reset of sessionsComeUp: when, after the clear,
// the last session came up and every route was whole again.
func resetSessions(t *testing.T, r *lab.Ready, tr *tracer, run int) (up, all time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	router := r.Cluster.Router()
	nl, err := r.Cluster.Host(lab.RouterHost).NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	bench := &routeTracer{tr: tr, paths: 3} // its benchRoute: a bench address over 3 next hops
	whole := func() (int, error) {
		routes, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		n := 0
		for _, rt := range routes {
			if bench.benchRoute(rt) != nil {
				n++
			}
		}
		return n, err
	}
	n := len(tr.all)
	// Every route whole and every session up for a while (the one
	// before reset them): the next clear starts from a settled router.
	var before map[netip.Addr]frr.Session
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		got, err := whole()
		if before, err = settled(ctx, router, got == n && err == nil); before != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("before reset %d the router holds %d of %d routes over 3 next hops, or a session is not settled (%v)", run, got, n, err)
		}
	}
	cleared := time.Now()
	if _, err := router.Vtysh(ctx, "clear bgp *"); err != nil {
		t.Fatal(err)
	}
	least, reads := n, 0
	var upAt, allAt time.Time
	for allAt.IsZero() && time.Since(cleared) < time.Minute {
		got, err := whole()
		seen := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		reads++
		least = min(least, got)
		if upAt.IsZero() {
			upAt = sessionsUp(ctx, router, len(before), cleared)
		}
		if least == 0 && got == n && !upAt.IsZero() {
			allAt = seen
		}
		time.Sleep(200 * time.Millisecond)
	}
	switch {
	case least > 0:
		t.Fatalf("BENCH sessions: %d of %d routes stayed at the router through `clear bgp *` (kept as stale?): nothing to time", least, n)
	case allAt.IsZero():
		t.Fatalf("BENCH sessions: not every route back a minute after `clear bgp *` (sessions up: %v)", !upAt.IsZero())
	}
	up, all = upAt.Sub(cleared), allAt.Sub(cleared)
	t.Logf("BENCH sessions: reset %d, `clear bgp *` at the router (%d sessions): the last came up %v after it; all %d routes over 3 next hops again %v after the clear, "+
		"%v after the last session came up (router's kernel table read every 200 ms, %d reads; the routes had all gone)",
		run, len(before), up.Round(time.Millisecond), n, all.Round(time.Millisecond), (all - up).Round(time.Millisecond), reads)
	return up, all
}

// settled returns the router's sessions when every route is whole and
// every session has been Established for 5 s, else nil.
func settled(ctx context.Context, router *frr.Client, whole bool) (map[netip.Addr]frr.Session, error) {
	if !whole {
		return nil, nil
	}
	ss, err := router.Sessions(ctx)
	if err != nil || len(ss) == 0 {
		return nil, err
	}
	for _, s := range ss {
		if s.State != "Established" || s.Uptime < 5*time.Second {
			return nil, nil
		}
	}
	return ss, nil
}

// sessionsUp returns when the last of want sessions came up again after
// cleared (the router's uptime of each, in ms), or the zero time while
// not all are Established since then.
func sessionsUp(ctx context.Context, router *frr.Client, want int, cleared time.Time) time.Time {
	now := time.Now()
	ss, err := router.Sessions(ctx)
	if err != nil || len(ss) < want {
		return time.Time{}
	}
	var last time.Time
	for _, s := range ss {
		at := now.Add(-s.Uptime)
		if s.State != "Established" || at.Before(cleared) {
			return time.Time{}
		}
		if at.After(last) {
			last = at
		}
	}
	return last
}
