package bgpspeaker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	mbgp "github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// routerSends has the receiver originate n IPv4 routes (10.x.y.0/24) that
// it advertises to the speaker, as a ToR that sends its table does.
func routerSends(t *testing.T, r *receiver, n int) {
	t.Helper()
	nh, err := bgp.NewPathAttributeNextHop(r.addr)
	if err != nil {
		t.Fatal(err)
	}
	attrs := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), nh}
	paths := make([]*apiutil.Path, 0, n)
	for i := range n {
		nlri, err := bgp.NewIPAddrPrefix(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(100 + i>>8), byte(i), 0}), 24))
		if err != nil {
			t.Fatal(err)
		}
		paths = append(paths, &apiutil.Path{Nlri: nlri, Attrs: attrs, Family: bgp.RF_IPv4_UC})
	}
	if _, err := r.srv.AddPath(apiutil.AddPathRequest{Paths: paths}); err != nil {
		t.Fatal(err)
	}
}

// speakerOf starts a speaker with one session to r advertising own.
func speakerOf(t *testing.T, r *receiver, own ...mbgp.Route) (*bgpspeaker.Speaker, *bgpspeaker.GoBGP) {
	t.Helper()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g := bgpspeaker.NewGoBGP(log, nil)
	sp := bgpspeaker.New(g, log, -1)
	t.Cleanup(func() { _ = sp.Shutdown(context.Background(), false) })
	ses := r.session("r", 64500, own...)
	d := bgpspeaker.Desired{Node: mbgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("127.0.0.2"), ASN: 64512, Sessions: []mbgp.Session{ses}}}
	if err := sp.Apply(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	return sp, g
}

// TestRoutesFromTheRouterStayOutOfTheTable: what a router sends is
// counted (Adj-RIB-In) but never taken into GoBGP's table — the VRF
// import that made each received route cost ~2 KiB — while the node's own
// routes still reach the router.
func TestRoutesFromTheRouterStayOutOfTheTable(t *testing.T) {
	rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
	routerSends(t, rcv, 300)
	own := mbgp.Route{Prefix: netip.MustParsePrefix("10.99.0.1/32"), Attrs: &mbgp.Attrs{}}
	sp, g := speakerOf(t, rcv, own)
	ctx := context.Background()
	waitFor(t, "the router's 300 routes received and ours sent", func() (bool, string) {
		st, _ := sp.Status(ctx)
		return len(st) == 1 && st[0].PrefixesReceived == 300 && st[0].PrefixesSent == 1, fmt.Sprintf("%+v", st)
	})
	if got := rcv.received(bgp.RF_IPv4_UC)["10.99.0.1/32"]; got == "" {
		t.Errorf("the router lacks the node's own route: %v", rcv.received(bgp.RF_IPv4_UC))
	}
	if n := bgpspeaker.GlobalPaths(g, bgp.RF_IPv4_VPN); n != 1 {
		t.Errorf("GoBGP's table holds %d IPv4 paths, want 1 (the node's own; none of the router's 300)", n)
	}
}

// TestMemReceivedRoutes measures the speaker's heap for routes a router
// sends it (BGPSPEAKER_RECEIVED, default 20,000). Off unless
// BGPSPEAKER_BENCH=1.
func TestMemReceivedRoutes(t *testing.T) {
	benchOnly(t)
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("BGPSPEAKER_RECEIVED")); err == nil && v > 0 {
		n = v
	}
	rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
	routerSends(t, rcv, n)
	base := heapInUse()
	sp, _ := speakerOf(t, rcv)
	waitFor(t, "every route received", func() (bool, string) {
		st, _ := sp.Status(context.Background())
		return len(st) == 1 && st[0].PrefixesReceived == int64(n), fmt.Sprintf("%+v", st)
	})
	time.Sleep(time.Second)
	t.Logf("speaker heap with %d routes received from the router: %.1f MiB", n, float64(heapInUse()-base)/(1<<20))
}

// heapInUse is the heap in use after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}
