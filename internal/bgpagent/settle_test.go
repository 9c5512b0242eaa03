package bgpagent

import (
	"net/netip"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/bgp"
)

// TestSettleWait: short decisions wait the configured settle; a long one
// makes the pause nine times as long, so deciding takes at most a tenth
// of the time while changes keep coming.
func TestSettleWait(t *testing.T) {
	for _, c := range []struct {
		settle, took, want time.Duration
	}{
		{50 * time.Millisecond, 0, 50 * time.Millisecond},
		{50 * time.Millisecond, 2 * time.Millisecond, 50 * time.Millisecond},
		{50 * time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond},
		{50 * time.Millisecond, 6 * time.Millisecond, 54 * time.Millisecond},
		{50 * time.Millisecond, 27 * time.Millisecond, 243 * time.Millisecond},
		{50 * time.Millisecond, 300 * time.Millisecond, 2700 * time.Millisecond},
		{time.Second, 27 * time.Millisecond, time.Second},
	} {
		got := settleWait(c.settle, c.took)
		if got != c.want {
			t.Errorf("settleWait(%v, %v) = %v, want %v", c.settle, c.took, got, c.want)
		}
		if share := float64(c.took) / float64(c.took+got); share > 1.0/decideShare+1e-9 {
			t.Errorf("settleWait(%v, %v): deciding takes %.0f %% of the time, want at most %d %%", c.settle, c.took, 100*share, 100/decideShare)
		}
	}
}

// TestSessionsChanged: a decision that only moves routes reads no session
// state (no status kick); anything the status shows of the sessions does.
func TestSessionsChanged(t *testing.T) {
	base := func() bgp.NodeResult {
		return bgp.NodeResult{Node: "n", RouterID: netip.MustParseAddr("10.0.0.1"), ASN: 64512,
			Sessions: []bgp.Session{{Peer: "tor", Address: netip.MustParseAddr("10.0.0.254"), LocalASN: 64512, HoldTime: 9 * time.Second,
				Routes: []bgp.Route{{Prefix: netip.MustParsePrefix("10.100.0.1/32")}}}}}
	}
	for _, c := range []struct {
		name   string
		change func(*bgp.NodeResult)
		want   bool
	}{
		{"nothing", func(*bgp.NodeResult) {}, false},
		{"a route more", func(n *bgp.NodeResult) {
			n.Sessions[0].Routes = append(n.Sessions[0].Routes, bgp.Route{Prefix: netip.MustParsePrefix("10.100.0.2/32")})
		}, false},
		{"no routes", func(n *bgp.NodeResult) { n.Sessions[0].Routes = nil }, false},
		{"hold time", func(n *bgp.NodeResult) { n.Sessions[0].HoldTime = 3 * time.Second }, true},
		{"a warning", func(n *bgp.NodeResult) { n.Sessions[0].Warnings = []string{"w"} }, true},
		{"blocked", func(n *bgp.NodeResult) { n.Sessions[0].Blocked = "why" }, true},
		{"a session more", func(n *bgp.NodeResult) { n.Sessions = append(n.Sessions, bgp.Session{Peer: "tor2"}) }, true},
		{"router ID", func(n *bgp.NodeResult) { n.RouterID = netip.MustParseAddr("10.0.0.2") }, true},
		{"excluded", func(n *bgp.NodeResult) { n.Excluded = true }, true},
	} {
		a, b := base(), base()
		c.change(&b)
		if got := sessionsChanged(a, b); got != c.want {
			t.Errorf("%s: sessionsChanged = %v, want %v", c.name, got, c.want)
		}
	}
	if !sessionsChanged(bgp.NodeResult{}, base()) {
		t.Error("the first decision with a session must kick the status")
	}
}
