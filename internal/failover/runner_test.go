package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// fakeCluster is a Service's endpoints and announcing node in memory.
type fakeCluster struct {
	mu        sync.Mutex
	eps       []Endpoint
	announced string
	changed   chan struct{} // closed and replaced on every change
}

func newFakeCluster(eps ...Endpoint) *fakeCluster {
	return &fakeCluster{eps: eps, changed: make(chan struct{})}
}

func (f *fakeCluster) set(eps ...Endpoint) {
	f.mu.Lock()
	f.eps = eps
	close(f.changed)
	f.changed = make(chan struct{})
	f.mu.Unlock()
}

func (f *fakeCluster) Endpoints(context.Context) ([]Endpoint, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.eps), nil
}

func (f *fakeCluster) AnnouncedBy(_ context.Context, addr netip.Addr) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.announced, nil
}

func (f *fakeCluster) WatchEndpoints(ctx context.Context, fn func([]Endpoint)) error {
	for {
		f.mu.Lock()
		eps, ch := slices.Clone(f.eps), f.changed
		f.mu.Unlock()
		fn(eps)
		select {
		case <-ctx.Done():
			return nil
		case <-ch:
		}
	}
}

var (
	macA = net.HardwareAddr{2, 0, 0, 0, 0, 0xa}
	macB = net.HardwareAddr{2, 0, 0, 0, 0, 0xb}
)

// fakeL2 plays a two-node cluster on loopback: a kill blackholes the
// address (nobody answers ARP) for takeover, then the survivor's MAC shows
// and the address answers with a stale endpoint behind it (every other
// answer a 503) until the dead node's endpoint leaves.
type fakeL2 struct {
	t        *testing.T
	srv      *loopServer
	bh       blackholeDial
	cluster  *fakeCluster
	owner    atomic.Pointer[net.HardwareAddr]
	takeover time.Duration
	stale    time.Duration
	kills    atomic.Int32
	restores atomic.Int32
	timers   sync.WaitGroup
}

func newFakeL2(t *testing.T) *fakeL2 {
	f := &fakeL2{t: t, srv: newLoopServer(t), takeover: 400 * time.Millisecond, stale: 700 * time.Millisecond}
	f.cluster = newFakeCluster(ep("10.1.0.1", "node-a", true), ep("10.1.0.2", "node-b", true))
	f.owner.Store(&macA)
	t.Cleanup(f.timers.Wait)
	return f
}

func (f *fakeL2) Owner(context.Context, netip.Addr) (net.HardwareAddr, error) {
	return *f.owner.Load(), nil
}

func (f *fakeL2) Kill(_ context.Context, node string) error {
	f.kills.Add(1)
	mac := macB
	if node == "node-b" {
		mac = macA
	}
	f.bh.on.Store(true)
	f.timers.Go(func() {
		time.Sleep(f.takeover)
		f.srv.setMode(modeAlt503)
		f.owner.Store(&mac)
		f.bh.on.Store(false)
		time.Sleep(f.stale)
		eps := []Endpoint{ep("10.1.0.1", "node-a", node != "node-a"), ep("10.1.0.2", "node-b", node != "node-b")}
		f.cluster.set(eps...)
		f.srv.setMode(modeOK)
	})
	return nil
}

func (f *fakeL2) Restore(context.Context, string) error {
	f.restores.Add(1)
	f.cluster.set(ep("10.1.0.1", "node-a", true), ep("10.1.0.2", "node-b", true))
	return nil
}

func testConfig(f *fakeL2) Config {
	return Config{
		Target: Target{Addr: f.srv.addr}, Rate: 50, Timeout: 250 * time.Millisecond, Runs: 2,
		Settle: 100 * time.Millisecond, SettleTimeout: 3 * time.Second, Quiet: 400 * time.Millisecond,
		MaxRun: 6 * time.Second, Warmup: 3 * time.Second, OwnerPoll: 20 * time.Millisecond,
	}
}

func TestMeasureTwoRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 4 s")
	}
	f := newFakeL2(t)
	var mu sync.Mutex
	var progress []string
	last := map[int]time.Duration{} // per run, the latest SinceKill said
	env := Env{Dial: f.bh.dial, Killer: f, Restorer: f, Owner: f, Cluster: f.cluster,
		NodeMACs: NodeMACs{{Node: "node-a", MAC: macA}, {Node: "node-b", MAC: macB}},
		Progress: func(e ProgressEvent) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, e.Text)
			// Issue 8 item 17: progress lines in time order.
			if e.SinceKill >= 0 {
				if e.SinceKill < last[e.Run] {
					t.Errorf("run %d: %q at %v said after a line at %v", e.Run, e.Text, e.SinceKill, last[e.Run])
				}
				last[e.Run] = e.SinceKill
			}
		}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runs, err := Measure(ctx, testConfig(f), env)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 2 {
		t.Fatalf("%d runs", len(runs))
	}
	for i, r := range runs {
		tl := r.Timeline
		t.Logf("run %d: killed %s new %s phase1 %s phase2 %s owner +%s gone +%s p1 %v p2 %v", r.Run, r.Node, r.NewNode,
			tl.Phase1, tl.Phase2, tl.OwnerChange.Sub(tl.Kill), tl.EndpointsGone.Sub(tl.Kill), tl.Counts[Phase1].ByClass, tl.Counts[Phase2].ByClass)
		wantKilled, wantNew := "node-a", "node-b"
		if i == 1 { // the survivor of run 1 announces in run 2
			wantKilled, wantNew = "node-b", "node-a"
		}
		if r.Node != wantKilled || r.NewNode != wantNew {
			t.Errorf("run %d killed %s, new owner %s; want %s, %s", r.Run, r.Node, r.NewNode, wantKilled, wantNew)
		}
		if !tl.Phase1Complete || !tl.Phase2Complete {
			t.Errorf("run %d incomplete: %v %v", r.Run, tl.Phase1Complete, tl.Phase2Complete)
		}
		if tl.OwnerChange.IsZero() || tl.EndpointsGone.IsZero() || tl.FirstError.IsZero() {
			t.Errorf("run %d misses markers: %+v", r.Run, tl)
		}
		if !tl.EndpointsGone.After(tl.OwnerChange) {
			t.Errorf("run %d: endpoints gone before the owner changed", r.Run)
		}
		if tl.Counts[Phase1].ByClass["connect-timeout"] == 0 || tl.Counts[Phase2].ByClass["http-503"] == 0 {
			t.Errorf("run %d classes: phase 1 %v, phase 2 %v", r.Run, tl.Counts[Phase1].ByClass, tl.Counts[Phase2].ByClass)
		}
		// A loaded machine may time out a request or two before the kill.
		if tl.Counts[PhaseBefore].Failed > 2 {
			t.Errorf("run %d: errors before the kill %v", r.Run, tl.Counts[PhaseBefore].ByClass)
		}
		// Generous: takeover is 0.4 s, the machine may be loaded.
		if tl.Phase1 < 300*time.Millisecond || tl.Phase1 > 3*time.Second {
			t.Errorf("run %d phase 1 = %s", r.Run, tl.Phase1)
		}
	}
	mu.Lock()
	all := strings.Join(progress, "\n")
	mu.Unlock()
	for _, s := range []string{"killing node-a", "owner-change", "endpoints-gone", "the address answers again", "restoring node-a", "restoring node-b"} {
		if !strings.Contains(all, s) {
			t.Errorf("progress lacks %q:\n%s", s, all)
		}
	}
	// Issue 8 item 15: the node killed by the last run is restored too,
	// and the cluster is healthy again when Measure returns.
	if n := f.restores.Load(); n != 2 {
		t.Errorf("%d restores after 2 runs, want 2 (one between the runs, one after the last)", n)
	}
	if err := CheckSpread(must(f.cluster.Endpoints(ctx))); err != nil {
		t.Errorf("after Measure: %v", err)
	}
	var buf bytes.Buffer
	if err := RenderSVG(&buf, runs[0], "loopback — run 1: killed "+runs[0].Node); err != nil {
		t.Fatal(err)
	}
	decodeSVG(t, buf.Bytes())
	if dir := os.Getenv("FAILOVER_SVG_OUT"); dir != "" {
		_ = os.WriteFile(filepath.Join(dir, "measure.svg"), buf.Bytes(), 0o644)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Without a restore command, or with --no-final-restore, the last killed
// node stays killed, and Measure says so loudly instead of silently.
func TestMeasureSaysTheLastNodeStaysKilled(t *testing.T) {
	for _, tc := range []struct {
		name      string
		restorer  bool
		noRestore bool
		want      string
	}{
		{"no restorer", false, false, "WARNING: node-a stays killed: no restore command was given"},
		{"--no-final-restore", true, true, "WARNING: node-a stays killed: --no-final-restore"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeL2(t)
			f.stale, f.takeover = 100*time.Millisecond, 100*time.Millisecond
			cfg := testConfig(f)
			cfg.Runs, cfg.NoFinalRestore = 1, tc.noRestore
			var mu sync.Mutex
			var progress []string
			env := Env{Dial: f.bh.dial, Killer: f, Owner: f, Cluster: f.cluster,
				NodeMACs: NodeMACs{{Node: "node-a", MAC: macA}, {Node: "node-b", MAC: macB}},
				Progress: func(e ProgressEvent) { mu.Lock(); progress = append(progress, e.Text); mu.Unlock() }}
			if tc.restorer {
				env.Restorer = f
			}
			if _, err := Measure(context.Background(), cfg, env); err != nil {
				t.Fatal(err)
			}
			mu.Lock()
			defer mu.Unlock()
			if last := progress[len(progress)-1]; !strings.HasPrefix(last, tc.want) {
				t.Errorf("last progress line %q, want %q", last, tc.want)
			}
			if n := f.restores.Load(); n != 0 {
				t.Errorf("%d restores, want 0", n)
			}
		})
	}
}

func TestMeasureRefusesWithoutSpread(t *testing.T) {
	f := newFakeL2(t)
	f.cluster.set(ep("10.1.0.1", "node-a", true), ep("10.1.0.2", "node-a", true))
	env := Env{Dial: f.bh.dial, Killer: f, Owner: f, Cluster: f.cluster}
	_, err := Measure(context.Background(), testConfig(f), env)
	if !errors.Is(err, ErrNotSpread) {
		t.Fatalf("err = %v, want ErrNotSpread", err)
	}
	if f.kills.Load() != 0 {
		t.Error("killed a node although the backends were not spread")
	}
}

func TestMeasureNeedsToKnowTheOwner(t *testing.T) {
	f := newFakeL2(t)
	cfg := testConfig(f)
	cfg.Runs = 1
	// The client sees a MAC no node is known to have, and the API names no owner.
	env := Env{Dial: f.bh.dial, Killer: f, Owner: f, Cluster: f.cluster}
	_, err := Measure(context.Background(), cfg, env)
	if err == nil || !strings.Contains(err.Error(), "--node-mac") {
		t.Fatalf("err = %v, want advice to give --node-mac", err)
	}
	if f.kills.Load() != 0 {
		t.Error("killed a node without knowing it announces")
	}
	// The API's answer is enough.
	f.cluster.mu.Lock()
	f.cluster.announced = "node-a"
	f.cluster.mu.Unlock()
	f.stale, f.takeover = 100*time.Millisecond, 100*time.Millisecond
	runs, err := Measure(context.Background(), cfg, env)
	if err != nil || len(runs) != 1 || runs[0].Node != "node-a" {
		t.Fatalf("with the API naming the owner: %v, %+v", err, runs)
	}
}

func TestMeasureAddressDown(t *testing.T) {
	f := newFakeL2(t)
	f.srv.stop()
	cfg := testConfig(f)
	cfg.Warmup = 300 * time.Millisecond
	env := Env{Dial: f.bh.dial, Killer: f, Owner: f, Cluster: f.cluster}
	_, err := Measure(context.Background(), cfg, env)
	if err == nil || !strings.Contains(err.Error(), "does not answer before the kill") || !strings.Contains(err.Error(), "refused") {
		t.Fatalf("err = %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	good := DefaultConfig(Target{Addr: netip.MustParseAddrPort("192.0.2.10:80")})
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for i, f := range []func(*Config){
		func(c *Config) { c.Runs = 0 },
		func(c *Config) { c.Rate = -1 },
		func(c *Config) { c.Quiet = 0 },
		func(c *Config) { c.Settle = -time.Second },
	} {
		c := good
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: want an error", i)
		}
	}
}

func TestMeasureNoOwnerNoAnnotation(t *testing.T) {
	f := newFakeL2(t)
	cfg := testConfig(f)
	cfg.Warmup = 300 * time.Millisecond
	none := OwnerFunc(func(context.Context, netip.Addr) (net.HardwareAddr, error) { return nil, nil })
	_, err := Measure(context.Background(), cfg, Env{Dial: f.bh.dial, Killer: f, Owner: none, Cluster: f.cluster})
	if err == nil || !strings.Contains(err.Error(), "same L2 segment") {
		t.Fatalf("err = %v", err)
	}
	if f.kills.Load() != 0 {
		t.Error("killed a node without knowing it announces")
	}
}

func TestProgressQueueInTimeOrder(t *testing.T) {
	var q progressQueue
	var got []string
	say := func(d time.Duration, format string, args ...any) {
		got = append(got, d.String()+" "+fmt.Sprintf(format, args...))
	}
	q.add(5*time.Second, "tick")
	q.add(800*time.Millisecond, "owner-change")
	q.flush(500*time.Millisecond, say) // now - lag: nothing is old enough yet
	// Learnt later (a request's outcome is known when it ends), but earlier.
	q.add(850*time.Millisecond, "recovered")
	q.add(50*time.Millisecond, "first error")
	q.flush(2*time.Second, say)
	q.flush(math.MaxInt64, say)
	want := []string{"50ms first error", "800ms owner-change", "850ms recovered", "5s tick"}
	if !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
