package bgpagent

import (
	"maps"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/bgp"
)

// TestReturns walks a node's advertisement through withdrawals and
// returns: only an address advertised again after a withdrawal comes
// back, with when it left; nothing on the first update after a start, for
// an aggregate, or for a blocked session; a withdrawal is forgotten after
// goneKept.
func TestReturns(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	node := func(blocked string, prefixes ...string) bgp.NodeResult {
		s := bgp.Session{Peer: "tor", Blocked: blocked}
		for _, p := range prefixes {
			s.Routes = append(s.Routes, bgp.Route{Prefix: netip.MustParsePrefix(p)})
		}
		// A second session carrying the same route must not count twice.
		return bgp.NodeResult{Sessions: []bgp.Session{s, {Peer: "tor-2", Routes: s.Routes}}}
	}
	a, b := "10.213.0.101/32", "fd00:213::101/128"
	var r returns
	for i, step := range []struct {
		at   time.Duration
		nr   bgp.NodeResult
		want map[string]time.Duration // address → when it was withdrawn
	}{
		{0, node("", a), nil}, // the first update: nothing known before
		{time.Second, node("", a, b), nil},
		{2 * time.Second, node("", b), nil}, // a withdrawn
		{7 * time.Second, node("", a, b), map[string]time.Duration{"10.213.0.101": 2 * time.Second}},
		{8 * time.Second, node("", a, b), nil},            // steady
		{9 * time.Second, node("", "10.213.0.0/24"), nil}, // aggregates only: both withdrawn
		{10 * time.Second, node("", a, b), map[string]time.Duration{"10.213.0.101": 9 * time.Second, "fd00:213::101": 9 * time.Second}},
		{11 * time.Second, node("blocked"), nil},
		{goneKept + 12*time.Second, node("", a), nil}, // withdrawn more than goneKept ago
	} {
		got := map[string]time.Duration{}
		for addr, when := range r.update(t0.Add(step.at), step.nr) {
			got[addr.String()] = when.Sub(t0)
		}
		if len(got) == 0 && len(step.want) == 0 {
			continue
		}
		if !maps.Equal(got, step.want) {
			t.Errorf("step %d: advertised again %v, want %v", i, got, step.want)
		}
	}
}

// TestHostAddrs: the host routes of a node's open sessions, sorted and
// once each, whether the sessions carry the same routes (a node's two
// ToRs: no sort), different ones, or are blocked; aggregates left out.
func TestHostAddrs(t *testing.T) {
	session := func(blocked string, prefixes ...string) bgp.Session {
		s := bgp.Session{Blocked: blocked}
		for _, p := range prefixes {
			s.Routes = append(s.Routes, bgp.Route{Prefix: netip.MustParsePrefix(p)})
		}
		return s
	}
	a, b, c, v6 := "10.213.0.1/32", "10.213.0.2/32", "10.213.0.3/32", "fd00:213::1/128"
	for _, tc := range []struct {
		name     string
		sessions []bgp.Session
		want     []string
	}{
		{"none", nil, nil},
		{"one session", []bgp.Session{session("", a, "10.213.0.0/24", b, v6)}, []string{"10.213.0.1", "10.213.0.2", "fd00:213::1"}},
		{"two ToRs, the same routes", []bgp.Session{session("", a, b), session("", a, b)}, []string{"10.213.0.1", "10.213.0.2"}},
		{"different routes", []bgp.Session{session("", b, c), session("", a, b), session("", b, c)}, []string{"10.213.0.1", "10.213.0.2", "10.213.0.3"}},
		{"an empty session between", []bgp.Session{session("", c), session(""), session("", c, v6)}, []string{"10.213.0.3", "fd00:213::1"}},
		{"blocked", []bgp.Session{session("AuthFailure", a), session("", c)}, []string{"10.213.0.3"}},
	} {
		var got []string
		for _, addr := range hostAddrs([]netip.Addr{}, bgp.NodeResult{Sessions: tc.sessions}) {
			got = append(got, addr.String())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: hostAddrs = %v, want %v", tc.name, got, tc.want)
		}
	}
	// Appending to addresses already there: the result is sorted as a whole.
	got := hostAddrs([]netip.Addr{netip.MustParseAddr("10.213.0.9")}, bgp.NodeResult{Sessions: []bgp.Session{session("", a, b)}})
	if want := []netip.Addr{netip.MustParseAddr("10.213.0.1"), netip.MustParseAddr("10.213.0.2"), netip.MustParseAddr("10.213.0.9")}; !slices.Equal(got, want) {
		t.Errorf("hostAddrs onto 10.213.0.9 = %v, want %v", got, want)
	}
}

// TestReturnsPruneFlapping: an address withdrawn and advertised again
// every second for two days stays remembered only from its last
// withdrawal, and the withdrawal log stays bounded by the addresses gone,
// not by the flaps.
func TestReturnsPruneFlapping(t *testing.T) {
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	node := func(prefixes ...string) bgp.NodeResult {
		s := bgp.Session{Peer: "tor"}
		for _, p := range prefixes {
			s.Routes = append(s.Routes, bgp.Route{Prefix: netip.MustParsePrefix(p)})
		}
		return bgp.NodeResult{Sessions: []bgp.Session{s}}
	}
	flap, steady := "10.213.0.1/32", "10.213.0.2/32"
	var r returns
	r.update(t0, node(flap, steady))
	r.update(t0, node(flap)) // steady withdrawn at t0, never back
	at := t0
	for i := range 2 * 86400 {
		at = t0.Add(time.Duration(i) * time.Second)
		if i%2 == 0 {
			r.update(at, node())
		} else if back := r.update(at, node(flap)); len(back) != 1 {
			t.Fatalf("flap %d: advertised again %v, want the flapping address", i, back)
		}
		if len(r.order) > 2*len(r.gone)+64 {
			t.Fatalf("after %d updates the withdrawal log holds %d entries for %d addresses gone", i, len(r.order), len(r.gone))
		}
	}
	if _, ok := r.gone[netip.MustParseAddr("10.213.0.2")]; ok {
		t.Error("the address withdrawn two days ago is still remembered")
	}
	if got := r.update(at.Add(time.Second), node(flap, steady)); len(got) != 0 {
		t.Errorf("advertised again after goneKept: %v, want nothing", got)
	}
}

// BenchmarkReturnsUpdate is the returns tracking's share of a decision at
// a node advertising 10,000 addresses to two ToRs, after 10,000 others
// were withdrawn (all remembered for goneKept).
func BenchmarkReturnsUpdate(b *testing.B) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	nr := func(first int) bgp.NodeResult {
		s := bgp.Session{Peer: "tor-1"}
		for i := range 10_000 {
			a := netip.AddrFrom4([4]byte{10, byte(first + i>>16), byte(i >> 8), byte(i)})
			s.Routes = append(s.Routes, bgp.Route{Prefix: netip.PrefixFrom(a, 32)})
		}
		s2 := s
		s2.Peer, s2.Routes = "tor-2", slices.Clone(s.Routes) // as bgp.Decide: an array per session
		return bgp.NodeResult{Sessions: []bgp.Session{s, s2}}
	}
	var r returns
	r.update(now, nr(1))
	r.update(now, nr(2)) // the first 10,000 withdrawn
	cur := nr(2)
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Millisecond)
		if back := r.update(now, cur); len(back) != 0 {
			b.Fatal(back)
		}
	}
}

// TestReturnsAgainstAModel drives the tracking through random decisions —
// one to three sessions, the same or different routes, blocked ones,
// aggregates, unsorted routes — so that it switches between holding the
// decision's routes and addresses of its own (and reuses its arrays), and
// checks every update against sets.
func TestReturnsAgainstAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 26))
	t0 := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	addr := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 213, 0, byte(i)}) }
	routes := func() []bgp.Route {
		var out []bgp.Route
		for i := range 24 {
			if rng.IntN(2) == 0 {
				out = append(out, bgp.Route{Prefix: netip.PrefixFrom(addr(i), 32)})
			}
		}
		if rng.IntN(8) == 0 {
			out = append(out, bgp.Route{Prefix: netip.MustParsePrefix("10.213.0.0/24")})
		}
		if rng.IntN(8) == 0 && len(out) > 1 {
			out[0], out[1] = out[1], out[0]
		}
		return out
	}
	var (
		r    returns
		prev map[netip.Addr]bool
		gone = map[netip.Addr]time.Time{}
	)
	for step := range 3000 {
		now := t0.Add(time.Duration(step) * time.Second)
		var nr bgp.NodeResult
		shared := routes()
		for range 1 + rng.IntN(3) {
			s := bgp.Session{Routes: shared}
			switch rng.IntN(6) {
			case 0:
				s.Routes = routes()
			case 1:
				s.Blocked = "AuthFailure"
			}
			nr.Sessions = append(nr.Sessions, s)
		}
		adv := map[netip.Addr]bool{}
		for _, s := range nr.Sessions {
			for _, rt := range s.Routes {
				if s.Blocked == "" && rt.Prefix.IsSingleIP() {
					adv[rt.Prefix.Addr()] = true
				}
			}
		}
		want := map[netip.Addr]time.Time{}
		if prev != nil {
			for a := range prev {
				if !adv[a] {
					gone[a] = now
				}
			}
			for a := range adv {
				if at, ok := gone[a]; ok && !prev[a] {
					want[a] = at
					delete(gone, a)
				}
			}
		}
		prev = adv
		got := r.update(now, nr)
		if len(got) != len(want) || !maps.Equal(got, want) && len(want) > 0 {
			t.Fatalf("step %d (%d sessions): advertised again %v, want %v", step, len(nr.Sessions), got, want)
		}
	}
}

// TestReturnsHoldsTheDecisionsRoutes: with sessions that carry the same
// host routes (a node's two ToRs) the tracking holds the decision's own
// routes, no addresses of its own; sessions that differ get them.
func TestReturnsHoldsTheDecisionsRoutes(t *testing.T) {
	now := time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)
	rs := []bgp.Route{{Prefix: netip.MustParsePrefix("10.213.0.1/32")}, {Prefix: netip.MustParsePrefix("10.213.0.2/32")}}
	var r returns
	r.update(now, bgp.NodeResult{Sessions: []bgp.Session{{Peer: "tor-1", Routes: rs}, {Peer: "tor-2", Routes: slices.Clone(rs)}}})
	if r.cur.addrs != nil || len(r.cur.routes) != 2 || &r.cur.routes[0] != &rs[0] {
		t.Fatalf("two ToRs with the same routes: held %v / %v, want the decision's routes", r.cur.routes, r.cur.addrs)
	}
	r.update(now, bgp.NodeResult{Sessions: []bgp.Session{{Peer: "tor-1", Routes: rs}, {Peer: "tor-2", Routes: rs[:1]}}})
	if r.cur.addrs == nil || r.cur.len() != 2 {
		t.Fatalf("sessions that differ: held %v / %v, want addresses of its own", r.cur.routes, r.cur.addrs)
	}
}
