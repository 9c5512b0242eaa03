package bgpagent

import (
	"maps"
	"net/netip"
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
