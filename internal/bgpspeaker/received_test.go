package bgpspeaker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	mbgp "github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// routerSends has the receiver originate n IPv4 routes (10.x.y.0/24) that
// it advertises to the speaker, as a ToR that sends its table does: with
// shared attributes (packed many to an UPDATE), or, onePerUpdate, each
// with a community of its own, so that each travels in an UPDATE of its
// own (as a table with varied attributes does).
func routerSends(t *testing.T, r *receiver, n int, onePerUpdate bool) {
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
		a := attrs
		if onePerUpdate {
			a = append(slices.Clip(attrs), bgp.NewPathAttributeCommunities([]uint32{uint32(i)}))
		}
		paths = append(paths, &apiutil.Path{Nlri: nlri, Attrs: a, Family: bgp.RF_IPv4_UC})
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
	routerSends(t, rcv, 300, false)
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
	if n := bgpspeaker.GlobalPaths(g, bgp.RF_IPv4_UC) + bgpspeaker.GlobalPaths(g, bgp.RF_IPv4_VPN); n != 1 {
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
	routerSends(t, rcv, n, false)
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

// TestMaxReceivedPrefixes: a router that sends more prefixes than the
// session's limit gets a Cease; the session stays shut with the reason
// MaxPrefixesExceeded and the time it opens again, what the router sent is
// dropped from memory and the node's route leaves the router; at that
// time it opens again (and, the router still sending too many, is shut
// for twice as long); raising the limit opens it at once.
func TestMaxReceivedPrefixes(t *testing.T) {
	rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
	routerSends(t, rcv, 300, false)
	var skew atomic.Int64 // the backend's clock runs ahead by this much
	clock := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	g := bgpspeaker.NewGoBGP(log, nil)
	bgpspeaker.SetNow(g, clock)
	sp := bgpspeaker.New(g, log, -1)
	t.Cleanup(func() { _ = sp.Shutdown(context.Background(), false) })
	own := mbgp.Route{Prefix: netip.MustParsePrefix("10.99.0.1/32"), Attrs: &mbgp.Attrs{}}
	ses := rcv.session("r", 64500, own)
	ses.GracefulRestart, ses.RestartTime = true, 120*time.Second // as by default: the Cease must still drop everything
	apply := func(limit uint32) {
		t.Helper()
		s := ses
		s.MaxReceived = limit
		d := bgpspeaker.Desired{Node: mbgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("127.0.0.2"), ASN: 64512, Sessions: []mbgp.Session{s}}}
		if err := sp.Apply(context.Background(), d); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	shut := func(what string) time.Time {
		t.Helper()
		var st bgpspeaker.SessionState
		waitFor(t, what, func() (bool, string) {
			sts, _ := sp.Status(ctx)
			if len(sts) == 1 {
				st = sts[0]
			}
			return st.Reason == bgpspeaker.ReasonMaxPrefixesExceeded && st.State == bgpspeaker.StateIdle, fmt.Sprintf("%+v", sts)
		})
		i := strings.Index(st.Message, "opens again at ")
		if i < 0 || !strings.Contains(st.Message, "more than 200 IPv4 prefixes") || !strings.Contains(st.Message, "send the nodes nothing") {
			t.Fatalf("the message names neither the limit, the time nor the fix: %q", st.Message)
		}
		at, err := time.Parse(time.RFC3339, strings.TrimSuffix(strings.Fields(st.Message[i+len("opens again at "):])[0], ";"))
		if err != nil {
			t.Fatalf("%q: %v", st.Message, err)
		}
		return at
	}
	apply(200)
	retry := shut("the session shut for 300 prefixes over a limit of 200")
	if d := retry.Sub(clock()); d < 25*time.Second || d > 31*time.Second {
		t.Errorf("opens again in %v, want 30 s", d)
	}
	waitFor(t, "the router's view: the node's route withdrawn", func() (bool, string) {
		r := rcv.received(bgp.RF_IPv4_UC)
		return r["10.99.0.1/32"] == "", fmt.Sprint(r)
	})
	if n := bgpspeaker.AdjInPaths(g, "127.0.0.3"); n != 0 {
		t.Errorf("the node still keeps %d of the router's routes after the Cease", n)
	}
	time.Sleep(3 * time.Second)
	if sts, _ := sp.Status(ctx); len(sts) != 1 || sts[0].Reason != bgpspeaker.ReasonMaxPrefixesExceeded {
		t.Fatalf("the session did not stay shut before its time: %+v", sts)
	}

	skew.Store(int64(31 * time.Second)) // the back-off's end
	_, _ = sp.Status(ctx)
	retry = shut("the session opened again and shut again: the router still sends 300")
	if d := retry.Sub(clock()); d < 55*time.Second || d > 61*time.Second {
		t.Errorf("the second time opens again in %v, want 60 s (doubled)", d)
	}

	apply(500)
	waitFor(t, "a raised limit opens the session at once", func() (bool, string) {
		sts, _ := sp.Status(ctx)
		return len(sts) == 1 && sts[0].State == bgpspeaker.StateEstablished && sts[0].PrefixesReceived == 300 && sts[0].Reason == "", fmt.Sprintf("%+v", sts)
	})
	waitFor(t, "the node's route back at the router", func() (bool, string) {
		r := rcv.received(bgp.RF_IPv4_UC)
		return r["10.99.0.1/32"] != "", fmt.Sprint(r)
	})
}

func TestPrefixLimitBackoff(t *testing.T) {
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute, 10 * time.Minute, 10 * time.Minute}
	for i, w := range want {
		if got := bgpspeaker.PrefixLimitBackoff(i + 1); got != w {
			t.Errorf("hit %d: %v, want %v", i+1, got, w)
		}
	}
}

// TestBenchReceiveLimitCost measures how long a session takes to receive
// BGPSPEAKER_RECEIVED routes (default 20,000), one per UPDATE: with the
// speaker's maxReceivedPrefixes (the default limit, checked at each
// listing), and with GoBGP's own per-AFI prefix limit at the same value
// on a plain GoBGP server — the reason the speaker does not use it:
// GoBGP counts the whole Adj-RIB-In after every UPDATE. Off unless
// BGPSPEAKER_BENCH=1.
func TestBenchReceiveLimitCost(t *testing.T) {
	benchOnly(t)
	n := 20000
	if v, err := strconv.Atoi(os.Getenv("BGPSPEAKER_RECEIVED")); err == nil && v > 0 {
		n = v
	}
	ctx := context.Background()
	t.Run("speaker", func(t *testing.T) {
		rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
		routerSends(t, rcv, n, true)
		start := time.Now()
		sp, _ := speakerOf(t, rcv) // the decision's default limit, as every BGPPeer gets
		took := untilReceived(t, n, start, func() int64 {
			if st, _ := sp.Status(ctx); len(st) == 1 {
				return st[0].PrefixesReceived
			}
			return 0
		})
		t.Logf("%d routes, one per UPDATE, received by the speaker (limit %d) %v after the peer was added", n, mbgp.DefaultMaxReceived, took)
	})
	for _, limit := range []uint32{0, mbgp.DefaultMaxReceived} {
		t.Run(fmt.Sprintf("gobgp-limit-%d", limit), func(t *testing.T) {
			rcv := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP)
			routerSends(t, rcv, n, true)
			srv := server.NewBgpServer(server.LoggerOption(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), &slog.LevelVar{}))
			go srv.Serve()
			t.Cleanup(srv.Stop)
			if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: 64512, RouterId: "127.0.0.2", ListenPort: -1}}); err != nil {
				t.Fatal(err)
			}
			fam := &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
			af := &api.AfiSafi{Config: &api.AfiSafiConfig{Family: fam, Enabled: true}}
			if limit > 0 {
				af.PrefixLimits = &api.PrefixLimit{Family: fam, MaxPrefixes: limit}
			}
			start := time.Now()
			err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: &api.Peer{
				Conf:      &api.PeerConf{NeighborAddress: "127.0.0.3", PeerAsn: 64500},
				Transport: &api.Transport{LocalAddress: "127.0.0.2", RemotePort: uint32(rcv.port)},
				AfiSafis:  []*api.AfiSafi{af},
			}})
			if err != nil {
				t.Fatal(err)
			}
			took := untilReceived(t, n, start, func() int64 {
				got := int64(0)
				_ = srv.ListPeer(ctx, &api.ListPeerRequest{}, func(p *api.Peer) {
					for _, a := range p.GetAfiSafis() {
						got += int64(a.GetState().GetReceived())
					}
				})
				return got
			})
			t.Logf("%d routes, one per UPDATE, received by plain GoBGP (its prefix limit %d, 0: none) %v after the peer was added", n, limit, took)
		})
	}
}

// untilReceived polls received until it counts n (at most 5 minutes) and
// returns the time since start.
func untilReceived(t *testing.T, n int, start time.Time, received func() int64) time.Duration {
	t.Helper()
	for deadline := start.Add(5 * time.Minute); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if received() == int64(n) {
			return time.Since(start).Round(10 * time.Millisecond)
		}
	}
	t.Fatalf("%d routes not received within 5 minutes", n)
	return 0
}
