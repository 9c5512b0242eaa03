package agent

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/eligibility"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
	"github.com/mooringlb/mooring/internal/responder"
)

// orderResponder records what the agent had published in Counted when
// the responder was handed each table.
type orderResponder struct {
	*agenttest.Responder
	mem     *gossipMembers
	counted [][]string
}

func (o *orderResponder) Apply(d map[int][]netip.Addr) {
	o.mem.mu.Lock()
	o.counted = append(o.counted, slices.Clone(o.mem.mine.Counted))
	o.mem.mu.Unlock()
	o.Responder.Apply(d)
}

func (o *orderResponder) Update(cs []responder.Change) {
	o.mem.mu.Lock()
	o.counted = append(o.counted, slices.Clone(o.mem.mine.Counted))
	o.mem.mu.Unlock()
	o.Responder.Update(cs)
}

// The peer side: a serving node counts a returning (Taking) peer, lets its
// addresses go, and only then confirms it in its metadata.
func TestTakeConfirmedAfterApply(t *testing.T) {
	returning := ready("eth0")
	returning.Taking = true
	metas := map[string]membership.NodeMeta{"node-2": returning, "node-3": ready("eth0")}
	a, _, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
	or := &orderResponder{Responder: resp, mem: mem}
	a.deps.Responder = or
	if err := a.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem.mu.Lock()
	mine := mem.mine
	mem.mu.Unlock()
	if !mine.Confirms || !slices.Equal(mine.Counted, []string{"node-2"}) {
		t.Fatalf("published %+v, want node-2 confirmed", mine)
	}
	if len(or.counted) == 0 || slices.Contains(or.counted[0], "node-2") {
		t.Fatalf("confirmed node-2 before the responder had the decision: %v", or.counted)
	}
	for _, v := range resp.Table()[eth0.Index] {
		if announce.Rank([]string{"node-1", "node-2", "node-3"}, v)[0] == "node-2" {
			t.Fatalf("still answers %s, node-2's", v)
		}
	}
	want := 0
	for _, v := range vips {
		if announce.Rank([]string{"node-1", "node-2", "node-3"}, v)[0] == "node-1" {
			want++
		}
	}
	if got := len(resp.Table()[eth0.Index]); got != want {
		t.Fatalf("answers %d addresses, want node-1's share %d", got, want)
	}

	// node-2 has taken them: no longer Taking, no longer confirmed.
	mem.mu.Lock()
	mem.metas["node-2"] = ready("eth0")
	mem.mu.Unlock()
	a.Trigger()
	if err := a.decide(context.Background()); err != nil {
		t.Fatal(err)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if len(mem.mine.Counted) != 0 {
		t.Fatalf("still confirms %v", mem.mine.Counted)
	}
}

// The returning side: after its hold-down node-1 publishes Ready and
// Taking and answers nothing until both peers confirm it, however long
// past TakeDelay. A peer that confirms takes but never confirms this one
// still answers for the addresses: node-1 waits past TakeMaxWait (counted
// in mooring_agent_take_unconfirmed_total), never answering beside it,
// and takes them only once that peer is gone from the members. (Before
// the fix it took them at TakeMaxWait: two responders, issue 22.)
func TestTakeWaitsForConfirmations(t *testing.T) {
	for _, lagging := range []bool{false, true} {
		t.Run(map[bool]string{false: "confirmed", true: "one peer never confirms"}[lagging], func(t *testing.T) {
			clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
			peer := func(counted ...string) membership.NodeMeta {
				m := ready("eth0")
				m.Since = clk.Now().Add(-time.Hour).Unix()
				m.Confirms, m.Counted = true, counted
				return m
			}
			metas := map[string]membership.NodeMeta{"node-2": peer(), "node-3": peer()}
			a, _, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
			a.deps.Clock = clk
			a.cfg.TakeDelay, a.cfg.TakeMaxWait = 500*time.Millisecond, 5*time.Second
			reg := prometheus.NewRegistry() // reconfigured's eligibility registers nothing
			a.elig = eligibility.New(a.cfg.eligibilityConfig(), time.Now(), a.log, reg, a.gossip())
			a.deps.Registerer = reg
			wantOwned := 0
			for _, v := range vips {
				if announce.Rank([]string{"node-1", "node-2", "node-3"}, v)[0] == "node-1" {
					wantOwned++
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			go func() { _ = a.decideLoop(ctx) }()
			published := func() membership.NodeMeta {
				mem.mu.Lock()
				defer mem.mu.Unlock()
				return mem.mine
			}
			waitFor := func(what string, ok func() bool) {
				t.Helper()
				deadline := time.Now().Add(5 * time.Second)
				for !ok() && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if !ok() {
					t.Fatalf("%s: published %+v, answers %d", what, published(), len(resp.Table()[eth0.Index]))
				}
			}
			waitFor("holding down", func() bool { return clk.HasWaiters() && strings.Contains(published().Reason, "holding down") })
			clk.Step(a.cfg.HoldDown)
			mem.Changed <- struct{}{}
			waitFor("ready and taking", func() bool { m := published(); return m.Ready && m.Taking })
			for range 10 { // 2 s past readiness: long past TakeDelay
				clk.Step(200 * time.Millisecond)
				time.Sleep(10 * time.Millisecond)
			}
			if got := len(resp.Table()[eth0.Index]); got != 0 || !published().Taking {
				t.Fatalf("took %d addresses without confirmations (published %+v)", got, published())
			}
			mem.mu.Lock()
			mem.metas["node-2"] = peer("node-1")
			if !lagging {
				mem.metas["node-3"] = peer("node-1")
			}
			mem.mu.Unlock()
			select {
			case mem.Changed <- struct{}{}:
			default:
			}
			if lagging {
				time.Sleep(50 * time.Millisecond)
				if got := len(resp.Table()[eth0.Index]); got != 0 {
					t.Fatalf("took %d addresses with node-3 unconfirmed", got)
				}
				for range 40 { // 8 s: past TakeMaxWait
					clk.Step(200 * time.Millisecond)
					time.Sleep(5 * time.Millisecond)
				}
				waitFor("the maximum wait counted", func() bool {
					clk.Step(10 * time.Millisecond) // the decision loop's coalescing window
					return gathered(a, "mooring_agent_take_unconfirmed_total") == 1
				})
				if got := len(resp.Table()[eth0.Index]); got != 0 || !published().Taking {
					t.Fatalf("took %d addresses past the maximum wait beside node-3, which never confirmed (published %+v)", got, published())
				}
				mem.Set("node-1", "node-2") // node-3 found dead: its addresses are free
				wantOwned = 0
				for _, v := range vips {
					if announce.Rank([]string{"node-1", "node-2"}, v)[0] == "node-1" {
						wantOwned++
					}
				}
			}
			waitFor("taken", func() bool {
				clk.Step(10 * time.Millisecond) // the decision loop's coalescing window
				return len(resp.Table()[eth0.Index]) == wantOwned && !published().Taking
			})
		})
	}
}
