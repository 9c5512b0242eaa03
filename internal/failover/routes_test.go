package failover

import (
	"bytes"
	"context"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A routed run: every third request goes to the dead next hop (ECMP) and
// times out until the route withdrawal at +0.9 s; then the dead node's
// endpoint behind the live ones fails every other request (503 here) until
// it leaves at +3 s.
func routedObserved(withdrawn float64) Observed {
	third := func(i int) Outcome {
		if i%3 == 0 {
			return ctO
		}
		return okO
	}
	return Observed{
		Start: ts(0), Kill: ts(1), End: ts(6), Routed: true,
		Events: []Event{{Kind: EventKill, At: ts(1)}, {Kind: EventRouteWithdrawn, At: ts(1 + withdrawn)},
			{Kind: EventEndpointsGone, At: ts(4)}},
		Results: cat(ticks(0, 1, always(okO)), ticks(1, 1+withdrawn, third),
			ticks(1+withdrawn, 4, alternate(okO, http503O)), ticks(4, 6, always(okO))),
	}
}

func TestComputeTimelineRouted(t *testing.T) {
	tl := ComputeTimeline(routedObserved(0.9))
	if !tl.Routed || !tl.RouteWithdrawn.Equal(ts(1.9)) {
		t.Fatalf("routed %v, withdrawn %v", tl.Routed, tl.RouteWithdrawn)
	}
	// The requests at +0.0, +0.3, +0.6 failed (every third from the
	// kill); the last failure before the withdrawal is at +0.6 and the next
	// answer at +0.7: phase 1 is 0.7 s, not the 0.1 s of "first answer after
	// the first failure", which ECMP would give at once.
	if !tl.Phase1Complete || tl.Phase1 != sec(0.7) || !tl.Recovered.Equal(ts(1.7)) {
		t.Fatalf("phase 1 %s complete %v recovered %v, want 0.7s", tl.Phase1, tl.Phase1Complete, tl.Recovered)
	}
	if c := tl.Counts[Phase1]; c.Failed != 3 || c.ByClass["connect-timeout"] != 3 {
		t.Fatalf("phase 1 counts %+v", c)
	}
	if c := tl.Counts[Phase2]; c.ByClass["http-503"] == 0 || c.ByClass["connect-timeout"] != 0 {
		t.Fatalf("phase 2 counts %+v: the stale endpoint's 503s belong there", c)
	}
	if !tl.Phase2Complete || !tl.EndpointsGone.Equal(ts(4)) {
		t.Fatalf("phase 2 %s complete %v", tl.Phase2, tl.Phase2Complete)
	}

	// No withdrawal within the run: phase 1 is incomplete, a lower bound.
	in := routedObserved(0.9)
	in.Events = slices.DeleteFunc(in.Events, func(e Event) bool { return e.Kind == EventRouteWithdrawn })
	tl = ComputeTimeline(in)
	if tl.Phase1Complete || tl.Phase1 != sec(5) {
		t.Fatalf("without a withdrawal: phase 1 %s complete %v, want ≥ 5s incomplete", tl.Phase1, tl.Phase1Complete)
	}
	// A withdrawal before any failure: no outage.
	in = routedObserved(0.9)
	in.Results = cat(ticks(0, 4, always(okO)))
	if tl = ComputeTimeline(in); !tl.Phase1Complete || tl.Phase1 != 0 {
		t.Fatalf("clean routed run: phase 1 %s complete %v", tl.Phase1, tl.Phase1Complete)
	}
}

// fakeRouter plays three nodes behind a router on loopback: the router's
// next hops for the address, and a kill that blackholes a third of the
// connections until the dead node's next hop is withdrawn.
type fakeRouter struct {
	srv      *loopServer
	cluster  *fakeCluster
	withdraw time.Duration
	mu       sync.Mutex
	hops     []netip.Addr
	dead     atomic.Bool
	n        atomic.Int64
	timers   sync.WaitGroup
}

var routedNodes = NodeAddrs{
	netip.MustParseAddr("10.1.0.1"): "node-a", netip.MustParseAddr("10.1.0.2"): "node-b",
	netip.MustParseAddr("10.1.0.3"): "node-c",
}

func newFakeRouter(t *testing.T) *fakeRouter {
	f := &fakeRouter{srv: newLoopServer(t), withdraw: 600 * time.Millisecond,
		hops: []netip.Addr{netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.1.0.2"), netip.MustParseAddr("10.1.0.3")}}
	// Backends on node-b and node-c: the victim is node-b, the first next
	// hop holding one.
	f.cluster = newFakeCluster(ep("10.2.0.1", "node-b", true), ep("10.2.0.2", "node-c", true))
	t.Cleanup(f.timers.Wait)
	return f
}

func (f *fakeRouter) Nexthops(context.Context, netip.Addr) ([]netip.Addr, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.hops), nil
}

// dial blackholes every third connection while the dead hop is routed.
func (f *fakeRouter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if f.dead.Load() && f.n.Add(1)%3 == 0 {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	var d net.Dialer
	return d.DialContext(ctx, network, addr)
}

func (f *fakeRouter) Kill(_ context.Context, node string) error {
	f.dead.Store(true)
	f.timers.Go(func() {
		time.Sleep(f.withdraw)
		f.mu.Lock()
		f.hops = slices.DeleteFunc(f.hops, func(a netip.Addr) bool { return routedNodes[a] == node })
		f.mu.Unlock()
		f.dead.Store(false)
		f.cluster.set(ep("10.2.0.1", "node-b", node != "node-b"), ep("10.2.0.2", "node-c", node != "node-c"))
	})
	return nil
}

func TestMeasureRouted(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 2 s")
	}
	f := newFakeRouter(t)
	cfg := Config{
		Target: Target{Addr: f.srv.addr}, Rate: 50, Timeout: 250 * time.Millisecond, Runs: 1,
		Settle: 100 * time.Millisecond, SettleTimeout: 3 * time.Second, Quiet: 400 * time.Millisecond,
		MaxRun: 6 * time.Second, Warmup: 3 * time.Second, OwnerPoll: 20 * time.Millisecond, NoFinalRestore: true,
	}
	var said []string
	var mu sync.Mutex
	env := Env{Dial: f.dial, Killer: f, Cluster: f.cluster, Routes: f, NodeAddrs: routedNodes,
		Progress: func(e ProgressEvent) { mu.Lock(); said = append(said, e.Text); mu.Unlock() }}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := Measure(ctx, cfg, env)
	if err != nil || len(runs) != 1 {
		t.Fatalf("Measure: %d runs, %v", len(runs), err)
	}
	r := runs[0]
	tl := r.Timeline
	t.Logf("killed %s, hops before %v, withdrawn +%s, phase 1 %s, failed %d", r.Node, r.HopsBefore,
		tl.RouteWithdrawn.Sub(tl.Kill), tl.Phase1, tl.Failed())
	if r.Node != "node-b" || !slices.Equal(r.HopsBefore, []string{"node-a", "node-b", "node-c"}) {
		t.Fatalf("killed %s with hops %v, want node-b (the first next hop with a backend)", r.Node, r.HopsBefore)
	}
	if !tl.Routed || tl.RouteWithdrawn.IsZero() || !tl.Phase1Complete || !tl.Phase2Complete {
		t.Fatalf("timeline %+v", tl)
	}
	if w := tl.RouteWithdrawn.Sub(tl.Kill); w < 500*time.Millisecond || w > 3*time.Second {
		t.Errorf("route withdrawn +%s, want about +0.6s", w)
	}
	if tl.Phase1 < 300*time.Millisecond || tl.Phase1 > tl.RouteWithdrawn.Sub(tl.Kill)+cfg.Timeout+time.Second {
		t.Errorf("phase 1 %s, want close to the withdrawal at +%s", tl.Phase1, tl.RouteWithdrawn.Sub(tl.Kill))
	}
	if tl.Counts[Phase1].ByClass["connect-timeout"] == 0 {
		t.Errorf("no connect timeouts in phase 1: %v", tl.Counts[Phase1].ByClass)
	}
	mu.Lock()
	all := strings.Join(said, "\n")
	mu.Unlock()
	if !strings.Contains(all, "a next hop of") || !strings.Contains(all, "route-withdrawn: node-b left the route") {
		t.Errorf("progress lacks the routed lines:\n%s", all)
	}

	var svg, table bytes.Buffer
	if err := RenderSVG(&svg, r, "routed"); err != nil {
		t.Fatal(err)
	}
	doc := decodeSVG(t, svg.Bytes())
	texts := strings.Join(doc.texts, "|")
	if !doc.markers["route withdrawn"] || doc.markers["owner change"] || !strings.Contains(texts, "phase 1 (route withdrawal)") ||
		!strings.Contains(texts, "routed: next hops at the router node-a node-b node-c before the kill; node-b left the route +") {
		t.Errorf("picture of a routed run: markers %v, texts %s", doc.markers, texts)
	}
	if err := WriteTable(&table, runs, SummarizeRuns([]Timeline{tl})); err != nil {
		t.Fatal(err)
	}
	if s := table.String(); !strings.Contains(s, "ROUTE GONE") || !strings.Contains(s, "route withdrawn at the router") ||
		!strings.Contains(s, "node-a,node-b,node-c") {
		t.Errorf("table of a routed run:\n%s", s)
	}
	rep := NewRunReport(r)
	if rep.Events.RouteWithdrawn == nil || len(rep.NexthopsBefore) != 3 {
		t.Errorf("JSON of a routed run: %+v", rep)
	}
	if s := NewSummaryJSON(SummarizeRuns([]Timeline{tl})); s.RouteWithdrawnS == nil || s.RouteWithdrawnS.N != 1 {
		t.Errorf("summary JSON: %+v", s)
	}
}

func TestChooseRoutedErrors(t *testing.T) {
	cfg := Config{Target: Target{Addr: netip.MustParseAddrPort("10.0.0.1:80")}}
	st := &state{haveHops: true}
	if _, err := chooseRouted(cfg, Env{NodeAddrs: routedNodes}, st); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Errorf("no hops: %v", err)
	}
	st.hops = []netip.Addr{netip.MustParseAddr("192.0.2.9")}
	if _, err := chooseRouted(cfg, Env{NodeAddrs: routedNodes}, st); err == nil || !strings.Contains(err.Error(), "no known node") {
		t.Errorf("unknown hop: %v", err)
	}
	// No backend on any next hop: the first by name.
	st.hops = []netip.Addr{netip.MustParseAddr("10.1.0.3"), netip.MustParseAddr("10.1.0.1")}
	if n, err := chooseRouted(cfg, Env{NodeAddrs: routedNodes}, st); err != nil || n != "node-a" {
		t.Errorf("chooseRouted = %s, %v; want node-a", n, err)
	}
}
