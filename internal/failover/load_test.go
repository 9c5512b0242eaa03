package failover

import (
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

func TestProbeClassesOnLoopback(t *testing.T) {
	s := newLoopServer(t)
	plain := (&net.Dialer{}).DialContext
	tlsSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	tlsSrv.Config.ErrorLog = log.New(io.Discard, "", 0)
	tlsSrv.StartTLS()
	defer tlsSrv.Close()
	tlsAddr := netip.MustParseAddrPort(tlsSrv.Listener.Addr().String())
	// A port that was just free: nothing listens there.
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := netip.MustParseAddrPort(ln.Addr().String())
	ln.Close()
	var bh blackholeDial
	bh.on.Store(true)

	tests := []struct {
		name   string
		mode   serverMode
		target Target
		dial   DialFunc
		want   string
	}{
		{"ok", modeOK, Target{Addr: s.addr}, plain, "ok"},
		{"tcp only", modeHang, Target{Addr: s.addr, Scheme: "tcp"}, plain, "ok"},
		{"503", mode503, Target{Addr: s.addr}, plain, "http-503"},
		{"hang", modeHang, Target{Addr: s.addr}, plain, "response-timeout"},
		{"reset", modeReset, Target{Addr: s.addr}, plain, "reset"},
		{"closed", modeClose, Target{Addr: s.addr}, plain, "closed"},
		{"refused", modeOK, Target{Addr: closedAddr}, plain, "refused"},
		{"no ARP answer", modeOK, Target{Addr: s.addr}, bh.dial, "connect-timeout"},
		{"https to plain http", modeOK, Target{Addr: s.addr, Scheme: "https"}, plain, "tls"},
		{"untrusted certificate", modeOK, Target{Addr: tlsAddr, Scheme: "https"}, plain, "tls"},
		{"https insecure", modeOK, Target{Addr: tlsAddr, Scheme: "https", InsecureSkipVerify: true}, plain, "ok"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s.setMode(tt.mode)
			out, ok := Probe(context.Background(), tt.dial, tt.target, 300*time.Millisecond)
			if !ok {
				t.Fatal("Probe says ctx ended")
			}
			if out.Key() != tt.want {
				t.Errorf("got %s (%s), want %s", out.Key(), out.Detail, tt.want)
			}
		})
	}
}

func TestProbeCanceledIsNotCounted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var bh blackholeDial
	bh.on.Store(true)
	if _, ok := Probe(ctx, bh.dial, Target{Addr: netip.MustParseAddrPort("127.0.0.1:9")}, time.Second); ok {
		t.Error("a request cut short by ctx must not count")
	}
}

// TestLoadThroughOutage drives the load generator through the phases of a
// failover on loopback: the address stops answering (dials hang: connect
// timeouts), the port is closed (refused), a backend accepts but never
// answers (response timeouts), then it is back but half the answers are
// 503 (stale endpoint) until the "endpoints" leave, then all is well. The
// timeline computed from the results must find both phases.
func TestLoadThroughOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("takes about 3 s")
	}
	s := newLoopServer(t)
	var bh blackholeDial
	var rec Recorder
	var n atomic.Int64
	load := &Load{Target: Target{Addr: s.addr}, Rate: 50, Timeout: 150 * time.Millisecond, Dial: bh.dial,
		Record: func(r Result) { n.Add(1); rec.Add(r) }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	go func() { done <- load.Run(ctx) }()

	step := func(d time.Duration, f func()) { time.Sleep(d); f() }
	var kill, gone time.Time
	step(400*time.Millisecond, func() { kill = time.Now(); bh.on.Store(true) })
	step(400*time.Millisecond, func() { bh.on.Store(false); s.stop() })
	step(400*time.Millisecond, func() { s.setMode(modeHang); s.restart() })
	step(400*time.Millisecond, func() { s.setMode(modeAlt503) })
	step(500*time.Millisecond, func() { gone = time.Now(); s.setMode(modeOK) })
	step(400*time.Millisecond, cancel)
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Load.Run did not return after cancel")
	}
	end := time.Now()
	if n.Load() < 50 {
		t.Fatalf("only %d requests recorded in %s at 50/s", n.Load(), end.Sub(start))
	}
	tl := ComputeTimeline(Observed{Start: start, Kill: kill, End: end, Results: rec.Snapshot(),
		Events: []Event{{Kind: EventEndpointsGone, At: gone}}})
	p1, p2 := tl.Counts[Phase1].ByClass, tl.Counts[Phase2].ByClass
	t.Logf("phase1 %s %v; phase2 %s %v; before %v after %v", tl.Phase1, p1, tl.Phase2, p2,
		tl.Counts[PhaseBefore].ByClass, tl.Counts[PhaseAfter].ByClass)
	for _, c := range []string{"connect-timeout", "refused", "response-timeout"} {
		if p1[c] == 0 {
			t.Errorf("phase 1 has no %s: %v", c, p1)
		}
	}
	if p2["http-503"] == 0 {
		t.Errorf("phase 2 has no http-503: %v", p2)
	}
	if !tl.Phase1Complete || !tl.Phase2Complete {
		t.Fatalf("phases incomplete: %+v", tl)
	}
	// Generous bounds: the outage was 1.2 s of wall time, on a loaded machine.
	if tl.Phase1 < 900*time.Millisecond || tl.Phase1 > 2500*time.Millisecond {
		t.Errorf("phase 1 = %s, want about 1.2 s", tl.Phase1)
	}
	if tl.Phase2 < 300*time.Millisecond || tl.Phase2 > 2*time.Second {
		t.Errorf("phase 2 = %s, want about 0.5 s", tl.Phase2)
	}
	if tl.Counts[PhaseBefore].Failed > 2 { // a loaded machine may time out one or two
		t.Errorf("errors before the kill: %v", tl.Counts[PhaseBefore].ByClass)
	}
}

func TestLoadValidate(t *testing.T) {
	ok := Load{Target: Target{Addr: netip.MustParseAddrPort("10.0.0.1:80")}, Rate: 10, Timeout: time.Second, Record: func(Result) {}}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := []func(*Load){
		func(l *Load) { l.Rate = 0 },
		func(l *Load) { l.Timeout = 0 },
		func(l *Load) { l.Record = nil },
		func(l *Load) { l.Target.Scheme = "ftp" },
		func(l *Load) { l.Target.Addr = netip.AddrPortFrom(l.Target.Addr.Addr(), 0) },
	}
	for i, f := range bad {
		l := ok
		f(&l)
		if l.Validate() == nil {
			t.Errorf("case %d: want an error", i)
		}
	}
}
