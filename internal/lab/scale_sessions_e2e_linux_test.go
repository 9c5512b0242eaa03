package lab_test

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
)

// sessionsComeUp is the BGP bench's last phase (issue 20: "10,000
// Services → all routes at the router ≤ 15 s after the sessions come
// up"): the router resets every session at once (`clear bgp *`: FRR 8.4
// sends a Hard Reset, so it drops every path the nodes sent, and zebra
// the kernel routes), the agents open them again, and the router's
// kernel table is read every 200 ms until it holds every bench address
// over three next hops again. It reports when the last session came up
// (the router's own uptime of each, in ms) and when the last route was
// whole, from the clear and from that session. The test fails when the
// routes did not go (the measurement would be of nothing) or did not all
// come back within a minute.
func sessionsComeUp(t *testing.T, r *lab.Ready, tr *tracer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	router := r.Cluster.Router()
	before, err := router.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nl, err := r.Cluster.Host(lab.RouterHost).NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	whole := func() (int, error) {
		routes, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: unix.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
		n := 0
		for _, rt := range routes {
			if rt.Dst == nil || len(rt.MultiPath) != 3 {
				continue
			}
			if a, ok := netip.AddrFromSlice(rt.Dst.IP); ok && tr.byAddr[a.Unmap()] != nil {
				n++
			}
		}
		return n, err
	}
	n := len(tr.all)
	if got, err := whole(); err != nil || got != n {
		t.Fatalf("before the reset the router holds %d of %d routes over 3 next hops (%v)", got, n, err)
	}
	cleared := time.Now()
	if _, err := router.Vtysh(ctx, "clear bgp *"); err != nil {
		t.Fatal(err)
	}
	least, reads := n, 0
	var up, all time.Time // the last session up, every route whole again
	for all.IsZero() && time.Since(cleared) < time.Minute {
		got, err := whole()
		seen := time.Now()
		if err != nil {
			t.Fatal(err)
		}
		reads++
		least = min(least, got)
		if up.IsZero() {
			up = sessionsUp(ctx, router, len(before), cleared)
		}
		if least == 0 && got == n && !up.IsZero() {
			all = seen
		}
		time.Sleep(200 * time.Millisecond)
	}
	switch {
	case least > 0:
		t.Fatalf("BENCH sessions: %d of %d routes stayed at the router through `clear bgp *` (kept as stale?): nothing to time", least, n)
	case all.IsZero():
		t.Fatalf("BENCH sessions: not every route back a minute after `clear bgp *` (sessions up: %v)", !up.IsZero())
	}
	t.Logf("BENCH sessions: `clear bgp *` at the router (%d sessions): the last came up %v after it; all %d routes over 3 next hops again %v after the clear, "+
		"%v after the last session came up (router's kernel table read every 200 ms, %d reads; the routes had all gone)",
		len(before), up.Sub(cleared).Round(time.Millisecond), n, all.Sub(cleared).Round(time.Millisecond), all.Sub(up).Round(time.Millisecond), reads)
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
