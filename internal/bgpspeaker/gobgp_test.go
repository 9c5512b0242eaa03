package bgpspeaker_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
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

// These tests run the GoBGP backend against a second, plain GoBGP server
// on loopback addresses (no namespaces, no privileges): what each peer
// receives, with which attributes and next hops.

// receiver is a plain GoBGP server that accepts one speaker.
type receiver struct {
	srv  *server.BgpServer
	addr netip.Addr
	port int
}

func freePort(t *testing.T, addr string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(addr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func newReceiver(t *testing.T, addr string, asn uint32, speaker string, speakerASN uint32, families ...api.Family_Afi) *receiver {
	t.Helper()
	port := freePort(t, addr)
	srv := server.NewBgpServer(server.LoggerOption(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})), &slog.LevelVar{}))
	go srv.Serve()
	t.Cleanup(srv.Stop)
	ctx := context.Background()
	if err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{Asn: asn, RouterId: addr, ListenPort: int32(port), ListenAddresses: []string{addr}}}); err != nil {
		t.Fatal(err)
	}
	p := &api.Peer{Conf: &api.PeerConf{NeighborAddress: speaker, PeerAsn: speakerASN}, Transport: &api.Transport{PassiveMode: true, LocalAddress: addr}}
	for _, f := range families {
		p.AfiSafis = append(p.AfiSafis, &api.AfiSafi{Config: &api.AfiSafiConfig{Family: &api.Family{Afi: f, Safi: api.Family_SAFI_UNICAST}, Enabled: true}})
	}
	if err := srv.AddPeer(ctx, &api.AddPeerRequest{Peer: p}); err != nil {
		t.Fatal(err)
	}
	return &receiver{srv: srv, addr: netip.MustParseAddr(addr), port: port}
}

// received maps prefix -> a description of the path's attributes.
func (r *receiver) received(f bgp.Family) map[string]string {
	out := map[string]string{}
	_ = r.srv.ListPath(apiutil.ListPathRequest{TableType: api.TableType_TABLE_TYPE_GLOBAL, Family: f}, func(p bgp.NLRI, ps []*apiutil.Path) {
		for _, path := range ps {
			var desc []string
			for _, a := range path.Attrs {
				switch a := a.(type) {
				case *bgp.PathAttributeCommunities:
					desc = append(desc, fmt.Sprint("comm", a.Value))
				case *bgp.PathAttributeLargeCommunities:
					for _, l := range a.Values {
						desc = append(desc, fmt.Sprintf("large %d:%d:%d", l.ASN, l.LocalData1, l.LocalData2))
					}
				case *bgp.PathAttributeLocalPref:
					desc = append(desc, fmt.Sprint("lp ", a.Value))
				case *bgp.PathAttributeNextHop:
					desc = append(desc, "nh "+a.Value.String())
				case *bgp.PathAttributeMpReachNLRI:
					desc = append(desc, "nh "+a.Nexthop.String())
				}
			}
			slices.Sort(desc)
			out[p.String()] = fmt.Sprint(desc)
		}
	})
	return out
}

func (r *receiver) session(name string, asn uint32, routes ...mbgp.Route) mbgp.Session {
	fams := []mbgp.Family{mbgp.IPv4, mbgp.IPv6}
	return mbgp.Session{Peer: name, Address: r.addr, Port: uint16(r.port), LocalASN: 64512, PeerASN: asn,
		SourceAddress: netip.MustParseAddr("127.0.0.2"), HoldTime: 9 * time.Second, KeepaliveTime: 3 * time.Second,
		ConnectTime: time.Second, Families: fams, Routes: routes, NextHop6: netip.MustParseAddr("2001:db8::2")}
}

func waitFor(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		ok, msg := cond()
		if ok {
			return
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within 20 s (last: %s)", what, last)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestGoBGPPerPeerRoutesAndAttributes: each peer receives exactly its own
// routes with its own attributes (communities, large communities, and
// LOCAL_PREF only over iBGP); an IPv6 route over an IPv4 session carries
// the node's IPv6 next hop; a withdrawal on one peer leaves the other be.
func TestGoBGPPerPeerRoutesAndAttributes(t *testing.T) {
	ebgp := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
	ibgp := newReceiver(t, "127.0.0.4", 64512, "127.0.0.2", 64512, api.Family_AFI_IP, api.Family_AFI_IP6)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	sp := bgpspeaker.New(bgpspeaker.NewGoBGP(log, nil), log, -1)
	ctx := context.Background()
	t.Cleanup(func() { _ = sp.Shutdown(ctx, false) })

	a1 := &mbgp.Attrs{Communities: []uint32{65000<<16 | 1}, Large: []mbgp.LargeCommunity{{Global: 1, Local1: 2, Local2: 3}}, LocalPref: 200, HasLocalPref: true}
	a2 := &mbgp.Attrs{Communities: []uint32{65000<<16 | 2}, LocalPref: 300, HasLocalPref: true}
	node := func(eRoutes, iRoutes []mbgp.Route) bgpspeaker.Desired {
		return bgpspeaker.Desired{Node: mbgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("127.0.0.2"), ASN: 64512,
			Sessions: []mbgp.Session{ebgp.session("e", 64500, eRoutes...), ibgp.session("i", 64512, iRoutes...)}}}
	}
	shared := mbgp.Route{Prefix: netip.MustParsePrefix("192.0.2.10/32"), Attrs: a1}
	v6 := mbgp.Route{Prefix: netip.MustParsePrefix("2001:db8:1::10/128"), Attrs: a1}
	only := mbgp.Route{Prefix: netip.MustParsePrefix("192.0.2.20/32"), Attrs: a2}
	if err := sp.Apply(ctx, node([]mbgp.Route{shared, v6}, []mbgp.Route{shared, only})); err != nil {
		t.Fatal(err)
	}
	want := func(r *receiver, f bgp.Family, w map[string]string) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%s %s routes", r.addr, f), func() (bool, string) {
			got := r.received(f)
			return equalMaps(got, w), fmt.Sprintf("%v, want %v", got, w)
		})
	}
	want(ebgp, bgp.RF_IPv4_UC, map[string]string{"192.0.2.10/32": "[comm[4259840001] large 1:2:3 nh 127.0.0.2]"})
	want(ebgp, bgp.RF_IPv6_UC, map[string]string{"2001:db8:1::10/128": "[comm[4259840001] large 1:2:3 nh 2001:db8::2]"})
	want(ibgp, bgp.RF_IPv4_UC, map[string]string{
		"192.0.2.10/32": "[comm[4259840001] large 1:2:3 lp 200 nh 127.0.0.2]",
		"192.0.2.20/32": "[comm[4259840002] lp 300 nh 127.0.0.2]",
	})

	// Withdraw the shared route from the eBGP peer only.
	if err := sp.Apply(ctx, node([]mbgp.Route{v6}, []mbgp.Route{shared, only})); err != nil {
		t.Fatal(err)
	}
	want(ebgp, bgp.RF_IPv4_UC, map[string]string{})
	want(ibgp, bgp.RF_IPv4_UC, map[string]string{
		"192.0.2.10/32": "[comm[4259840001] large 1:2:3 lp 200 nh 127.0.0.2]",
		"192.0.2.20/32": "[comm[4259840002] lp 300 nh 127.0.0.2]",
	})
	// The counts follow within countAdvertisedEvery (5 s).
	waitFor(t, "prefixes sent: e 1, i 2", func() (bool, string) {
		st, err := sp.Status(ctx)
		if err != nil || len(st) != 2 || st[0].State != bgpspeaker.StateEstablished || st[1].State != bgpspeaker.StateEstablished {
			return false, fmt.Sprintf("status %+v %v", st, err)
		}
		return st[0].PrefixesSent == 1 && st[1].PrefixesSent == 2, fmt.Sprintf("e %d, i %d", st[0].PrefixesSent, st[1].PrefixesSent)
	})
}

// TestGoBGPAdvertisedCountIsCached: the advertised prefixes are counted at
// most every CountAdvertisedEvery (the count runs every path through the
// peer's export); between counts a session keeps its last count, a session
// that is down reports none, and one that came back is counted at the next
// read without waiting out the interval.
func TestGoBGPAdvertisedCountIsCached(t *testing.T) {
	r := newReceiver(t, "127.0.0.3", 64500, "127.0.0.2", 64512, api.Family_AFI_IP)
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	var clock atomic.Int64 // fake time in ns; GoBGP's own timers run on real time
	clock.Store(time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC).UnixNano())
	advance := func(d time.Duration) { clock.Add(int64(d)) }
	g := bgpspeaker.NewGoBGP(log, nil)
	bgpspeaker.SetNow(g, func() time.Time { return time.Unix(0, clock.Load()) })
	sp := bgpspeaker.New(g, log, -1)
	ctx := context.Background()
	t.Cleanup(func() { _ = sp.Shutdown(ctx, false) })
	routes := func(n int) bgpspeaker.Desired {
		s := r.session("e", 64500)
		s.Families = []mbgp.Family{mbgp.IPv4}
		for i := range n {
			s.Routes = append(s.Routes, mbgp.Route{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{192, 0, 2, byte(10 + i)}), 32), Attrs: &mbgp.Attrs{}})
		}
		return bgpspeaker.Desired{Node: mbgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("127.0.0.2"), ASN: 64512, Sessions: []mbgp.Session{s}}}
	}
	status := func() bgpspeaker.SessionState {
		t.Helper()
		st, err := sp.Status(ctx)
		if err != nil || len(st) != 1 {
			t.Fatalf("status %+v %v", st, err)
		}
		return st[0]
	}
	received := func(n int) {
		t.Helper()
		waitFor(t, fmt.Sprintf("%d routes at the receiver", n), func() (bool, string) {
			got := r.received(bgp.RF_IPv4_UC)
			return len(got) == n, fmt.Sprint(got)
		})
	}
	if err := sp.Apply(ctx, routes(1)); err != nil {
		t.Fatal(err)
	}
	received(1)
	waitFor(t, "established, 1 prefix counted", func() (bool, string) {
		advance(bgpspeaker.CountAdvertisedEvery) // every read may count
		s := status()
		return s.State == bgpspeaker.StateEstablished && s.PrefixesSent == 1, fmt.Sprintf("%+v", s)
	})

	// Two more routes: reads within the interval keep the count they had.
	if err := sp.Apply(ctx, routes(3)); err != nil {
		t.Fatal(err)
	}
	received(3)
	for range 3 {
		advance(bgpspeaker.CountAdvertisedEvery / 4)
		if s := status(); s.PrefixesSent != 1 {
			t.Fatalf("%v into the interval: %d prefixes sent, want the last count, 1 (counted again too early)", bgpspeaker.CountAdvertisedEvery*3/4, s.PrefixesSent)
		}
	}
	advance(bgpspeaker.CountAdvertisedEvery / 4)
	if s := status(); s.PrefixesSent != 3 {
		t.Fatalf("an interval after the last count: %d prefixes sent, want 3", s.PrefixesSent)
	}

	// The receiver shuts the session: down, nothing sent.
	if err := r.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: "127.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the session down, 0 prefixes sent", func() (bool, string) {
		s := status() // the clock stands still: only the state change may count
		return s.State != bgpspeaker.StateEstablished && s.PrefixesSent == 0, fmt.Sprintf("%+v", s)
	})
	if err := r.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: "127.0.0.2"}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "established again", func() (bool, string) {
		s := status()
		return s.State == bgpspeaker.StateEstablished, fmt.Sprintf("%+v", s)
	})
	// The read that saw it come back did not count; the next one does,
	// with the clock still standing.
	if s := status(); s.PrefixesSent != 3 {
		t.Fatalf("after the session came back: %d prefixes sent, want 3 counted at once", s.PrefixesSent)
	}
}
