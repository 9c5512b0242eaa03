package bfd

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bfd"
	"golang.org/x/net/ipv4"

	"github.com/mooringlb/mooring/internal/netlab"
)

// end is one node's Server and what its events said.
type end struct {
	host     *netlab.Host
	srv      *Server
	failures atomic.Int32
}

// fast is 300 ms × 3, the lab's BFD profile.
var fast = Config{DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond, DetectMult: 3}

func startEnd(t *testing.T, h *netlab.Host, peers ...netip.Addr) *end {
	t.Helper()
	e := &end{host: h, srv: NewServer(slog.New(slog.NewTextHandler(io.Discard, nil)))}
	t.Cleanup(e.srv.Close)
	if err := h.Do(func() error {
		for _, p := range peers {
			if err := e.srv.Add(p, netip.Addr{}, fast, true, Events{Failure: func() { e.failures.Add(1) }}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return e
}

func waitState(t *testing.T, e *end, peer netip.Addr, want bfd.StateType, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		st, _, stats, _ := e.srv.State(peer)
		if st == want {
			return time.Since(start)
		}
		if time.Since(start) > within {
			t.Fatalf("%s's session with %s: %v after %s, want %v (%+v)", e.host.Name, peer, st, within, want, stats)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestServers runs two nodes' Servers against each other over a real
// link (IPv4 and IPv6, network namespaces): both sessions come Up; a
// packet that crossed a router (TTL below 255) is discarded; a node that
// goes silent is a failure on the other within the detection time; a node
// that comes back with new sessions (new discriminators, as a restarted
// agent or FRR's re-keying) brings them Up without a failure; a session
// disabled in place is Down and silent at once (a failure only at the
// other end) and comes back Up when enabled.
func TestServers(t *testing.T) {
	lab := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	h1, h2 := lab.Nodes()[0], lab.Nodes()[1]
	a := startEnd(t, h1, h2.Addr4, h2.Addr6)
	b := startEnd(t, h2, h1.Addr4, h1.Addr6)
	for _, c := range []struct {
		e    *end
		peer netip.Addr
	}{{a, h2.Addr4}, {a, h2.Addr6}, {b, h1.Addr4}, {b, h1.Addr6}} {
		waitState(t, c.e, c.peer, bfd.StateUp, 10*time.Second)
	}

	// A packet with TTL 64 from node-2 to node-1: discarded, nothing moves.
	_, _, before, _ := a.srv.State(h2.Addr4)
	if err := h2.Do(func() error {
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: h1.Addr4.AsSlice(), Port: Port})
		if err != nil {
			return err
		}
		defer c.Close()
		if err := ipv4.NewConn(c).SetTTL(64); err != nil {
			return err
		}
		b, _ := (&bfd.BFDHeader{Version: 1, State: bfd.StateAdminDown, DetectTimeMultiplier: 3, MyDiscriminator: 99}).MarshalBinary()
		_, err = c.Write(b)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 2*time.Second, "the TTL-64 packet discarded", func() (bool, string) {
		st, _, s, _ := a.srv.State(h2.Addr4)
		return s.Discarded > before.Discarded && st == bfd.StateUp, fmt.Sprintf("%v %+v", st, s)
	})

	// node-2 restarts its BFD at once: new discriminators, no failure.
	b.srv.Close()
	b = startEnd(t, h2, h1.Addr4, h1.Addr6)
	for _, p := range []netip.Addr{h1.Addr4, h1.Addr6} { // the new sessions start Down
		waitState(t, b, p, bfd.StateUp, 5*time.Second)
	}
	time.Sleep(time.Second) // a few packets at the Up rate
	for _, p := range []netip.Addr{h2.Addr4, h2.Addr6} {
		waitState(t, a, p, bfd.StateUp, time.Second)
	}
	if n := a.failures.Load(); n != 0 {
		t.Errorf("node-1 counted %d failures when node-2's sessions were re-created", n)
	}

	// node-1 disables its IPv4 session (the BGP session it watches is not
	// Established): Down at once without a failure, silent, so node-2's
	// detection time runs out; enabled again, both ends come back Up.
	b.failures.Store(0)
	a.srv.SetEnabled(h2.Addr4, false)
	waitState(t, a, h2.Addr4, bfd.StateDown, time.Second)
	waitState(t, b, h1.Addr4, bfd.StateDown, 3*time.Second)
	_, _, off, _ := a.srv.State(h2.Addr4)
	time.Sleep(time.Second)
	if st, _, s, _ := a.srv.State(h2.Addr4); st != bfd.StateDown || s.Sent != off.Sent || s.Received != off.Received {
		t.Errorf("node-1's disabled session: %v, %+v then %+v; want Down, nothing sent or taken", st, off, s)
	}
	if a.failures.Load() != 0 || b.failures.Load() != 1 {
		t.Errorf("disabling: node-1 %d failures, node-2 %d; want 0 and 1", a.failures.Load(), b.failures.Load())
	}
	a.srv.SetEnabled(h2.Addr4, true)
	waitState(t, a, h2.Addr4, bfd.StateUp, 5*time.Second)
	waitState(t, b, h1.Addr4, bfd.StateUp, 5*time.Second)
	if st, _, _, _ := a.srv.State(h2.Addr6); st != bfd.StateUp {
		t.Errorf("node-1's IPv6 session %v while its IPv4 one was off, want Up", st)
	}

	// node-2 goes silent: node-1 fails both sessions within 3 × 300 ms
	// (plus a poll's slack).
	b.srv.Close()
	gone := time.Now()
	for _, p := range []netip.Addr{h2.Addr4, h2.Addr6} {
		waitState(t, a, p, bfd.StateDown, 3*time.Second)
	}
	took := time.Since(gone)
	t.Logf("node-1's sessions went Down %s after node-2 went silent (detection time 900 ms)", took.Round(time.Millisecond))
	if took > 2*time.Second || a.failures.Load() != 2 {
		t.Errorf("Down after %s with %d failures, want ≤ 2 s (3 × 300 ms, not the 1 s rate of a session not Up) and 2", took, a.failures.Load())
	}
}

func waitFor(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s (%s)", what, within, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
