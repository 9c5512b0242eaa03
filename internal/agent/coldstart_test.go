package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
)

// A peer that publishes "starting" counts as a candidate for everything
// only at a cold start: when no member served before it started, and for
// ColdStartWindow. A peer restarting into a cluster that served without it
// holds down first, so node-1 keeps serving the addresses it would get;
// however young node-1 is (the gap this closes: a survivor under 10 s old
// let a restarting peer's addresses go, and nobody answered until that
// peer had started).
func TestStartingPeerIsCandidateOnlyAtColdStart(t *testing.T) {
	// Times relative to base, 2 s from now: node-3's readiness comes at
	// most 1 s before node-1 (the agent under test) started, so that it is
	// a cold start itself and serves at once.
	base := time.Now().Add(2 * time.Second)
	ms := func(d time.Duration) int64 { return base.Add(d).UnixMilli() }
	starting := func(born int64) membership.NodeMeta {
		return membership.NodeMeta{Ranking: announce.RankingVersion(), Reason: "starting", Born: born}
	}
	readySince := func(at int64) membership.NodeMeta {
		m := ready("eth0")
		m.Since, m.ReadyAt = at/1000, at
		return m
	}
	for _, tc := range []struct {
		name         string
		node2, node3 membership.NodeMeta
		serves       bool // node-1 serves node-2's share while node-2 starts
	}{
		{name: "restart: node-3 served 3 s before node-2 started", node2: starting(ms(0)), node3: readySince(ms(-3 * time.Second)), serves: true},
		{name: "restart: node-3 ready 2.1 s before", node2: starting(ms(0)), node3: readySince(ms(-2100 * time.Millisecond)), serves: true},
		{name: "cold start: node-3 ready 1 s before node-2 started", node2: starting(ms(0)), node3: readySince(ms(-time.Second)), serves: false},
		{name: "cold start: node-3 starting too", node2: starting(ms(0)), node3: starting(ms(0)), serves: false},
		{name: "cold start: node-3 ready after node-2 started", node2: starting(ms(0)), node3: readySince(ms(500 * time.Millisecond)), serves: false},
		{name: "starting longer than the window", node2: starting(ms(-13 * time.Second)), node3: starting(ms(0)), serves: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			metas := map[string]membership.NodeMeta{"node-2": tc.node2, "node-3": tc.node3}
			a, _, _, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
			var theirs []netip.Addr // node-2's, which node-1 serves when node-2 is no candidate
			for _, v := range vips {
				if r := announce.Rank([]string{"node-1", "node-2", "node-3"}, v); r[0] == "node-2" && r[1] == "node-1" {
					theirs = append(theirs, v)
				}
			}
			if len(theirs) == 0 {
				t.Fatal("fixture: node-1 is second for none of node-2's addresses")
			}
			a.Trigger()
			if err := a.decide(context.Background()); err != nil {
				t.Fatal(err)
			}
			got := resp.Table()[eth0.Index]
			for _, v := range theirs {
				if slices.Contains(got, v) != tc.serves {
					t.Fatalf("node-1 answers %v while node-2 starts; node-2's %s served by node-1: %v, want %v", got, v, !tc.serves, tc.serves)
				}
			}
		})
	}
}
