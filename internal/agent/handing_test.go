package agent

import (
	"bytes"
	"context"
	"encoding/hex"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
	"github.com/mooringlb/mooring/internal/responder"
)

// Make before break (handing.go): node-1 serves node-2's share while
// node-2 is away; when node-2 returns (Ready, Taking) node-1 counts and
// confirms it but keeps answering node-2's share until node-2 took it
// (Taking cleared: its took message or its metadata), so that some node
// answers at every instant, with node-2's MAC when node-2 publishes it and
// node-1's kernel has it as a neighbour, so that both answers name the
// same MAC once node-2 answers too. Without the hand-over node-1 let go
// at once.
func TestHandOverKeepsAnsweringUntilTaken(t *testing.T) {
	for _, tc := range []struct {
		name string
		// end ends the hand-over: what node-2 publishes next, or a clock
		// step past TakeMaxWait (Taking stays).
		end     func(metas map[string]membership.NodeMeta, clk *clocktesting.FakeClock)
		keep    bool // node-1 still answers node-2's share afterwards
		expired bool // the hand-over expired (counted)
		// neighbour: node-1's kernel has node-2's MAC as a neighbour on
		// eth0, so it answers node-2's share with node-2's MAC meanwhile.
		neighbour bool
	}{
		{name: "took, answering with node-2's MAC", neighbour: true, end: func(metas map[string]membership.NodeMeta, _ *clocktesting.FakeClock) {
			metas["node-2"] = withHW(ready("eth0"))
		}},
		{name: "gone before taking, after answering with its MAC", keep: true, neighbour: true, end: func(metas map[string]membership.NodeMeta, _ *clocktesting.FakeClock) {
			away := withHW(ready("eth0"))
			away.Ready = false
			metas["node-2"] = away
		}},
		{name: "took", end: func(metas map[string]membership.NodeMeta, _ *clocktesting.FakeClock) {
			metas["node-2"] = ready("eth0")
		}},
		{name: "gone before taking", keep: true, end: func(metas map[string]membership.NodeMeta, _ *clocktesting.FakeClock) {
			away := ready("eth0")
			away.Ready = false
			metas["node-2"] = away
		}},
		{name: "never takes", expired: true, end: func(_ map[string]membership.NodeMeta, clk *clocktesting.FakeClock) {
			clk.Step(6 * time.Second)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			away := ready("eth0")
			away.Ready = false
			metas := map[string]membership.NodeMeta{"node-2": away, "node-3": ready("eth0")}
			a, _, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
			rec := &claimRecorder{Responder: resp}
			a.deps.Responder = rec
			a.deps.Links = neighbourLinks{inspectLinks: inspectLinks{links: []host.LinkInfo{eth0}}, known: tc.neighbour}
			clk := clocktesting.NewFakeClock(time.Now())
			a.deps.Clock = clk
			a.cfg.TakeMaxWait = 5 * time.Second
			decide := func() {
				t.Helper()
				a.Trigger()
				if err := a.decide(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			var own, theirs []netip.Addr // node-1's share with node-2 back, and what it serves of node-2's while away
			for _, v := range vips {
				switch r := announce.Rank([]string{"node-1", "node-2", "node-3"}, v); {
				case r[0] == "node-1":
					own = append(own, v)
				case r[0] == "node-2" && r[1] == "node-1":
					theirs = append(theirs, v)
				}
			}
			if len(theirs) == 0 {
				t.Fatal("fixture: node-1 serves none of node-2's addresses while node-2 is away")
			}
			answers := func() []netip.Addr {
				got := slices.Clone(resp.Table()[eth0.Index])
				slices.SortFunc(got, netip.Addr.Compare)
				return got
			}
			sorted := func(s ...[]netip.Addr) []netip.Addr {
				out := slices.Concat(s...)
				slices.SortFunc(out, netip.Addr.Compare)
				return out
			}
			decide()
			served := answers()
			for _, v := range theirs {
				if !slices.Contains(served, v) {
					t.Fatalf("node-1 does not serve %s while node-2 is away: %v", v, served)
				}
			}

			// node-2 returns and takes: node-1 confirms it and answers on.
			taking := withHW(ready("eth0"))
			taking.Taking = true
			mem.mu.Lock()
			metas["node-2"] = taking
			mem.mu.Unlock()
			decide()
			mem.mu.Lock()
			counted := mem.mine.Counted
			mem.mu.Unlock()
			if !slices.Equal(counted, []string{"node-2"}) {
				t.Fatalf("node-1 confirms %v, want node-2", counted)
			}
			if got := answers(); !slices.Equal(got, served) {
				t.Fatalf("node-1 answers %v while node-2 takes, want %v (every address it served: make before break)", got, served)
			}
			if got, want := rec.claimedNow(), theirs; !tc.neighbour && len(got) > 0 || tc.neighbour && !slices.Equal(got, want) {
				t.Fatalf("node-1 answers %v with node-2's MAC, want %v (neighbour known: %v)", got, want, tc.neighbour)
			}

			mem.mu.Lock()
			tc.end(metas, clk)
			mem.mu.Unlock()
			decide()
			want := sorted(own, theirs)
			if !tc.keep {
				want = sorted(own)
			}
			if got := answers(); !slices.Equal(got, want) {
				t.Fatalf("node-1 answers %v after the hand-over, want %v", got, want)
			}
			if got := rec.claimedNow(); len(got) > 0 {
				t.Fatalf("node-1 still answers %v with node-2's MAC after the hand-over", got)
			}
			if tc.keep && tc.neighbour && !slices.Equal(rec.reannounced, theirs) {
				t.Fatalf("re-announced %v, want %v: clients may have learned node-2's MAC", rec.reannounced, theirs)
			}
			wantExpired := 0.0
			if tc.expired {
				wantExpired = float64(len(theirs))
			}
			if got := counterValue(a.met.handOverExpired); got != wantExpired {
				t.Fatalf("mooring_agent_hand_overs_expired_total = %v, want %v", got, wantExpired)
			}
			if got := counterValue(a.met.handOvers); got != float64(len(theirs)) {
				t.Fatalf("mooring_agent_hand_overs_total = %v, want %d", got, len(theirs))
			}
		})
	}
}

var node2MAC = net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}

// withHW adds node-2's eth0 MAC to m.
func withHW(m membership.NodeMeta) membership.NodeMeta {
	m.HW = map[string]string{"eth0": hex.EncodeToString(node2MAC)}
	return m
}

// neighbourLinks knows node-2's MAC as a neighbour on every interface
// when known.
type neighbourLinks struct {
	inspectLinks
	known bool
}

func (l neighbourLinks) NeighbourMACs(int) ([]net.HardwareAddr, error) {
	if l.known {
		return []net.HardwareAddr{node2MAC}, nil
	}
	return nil, nil
}

// claimRecorder records which addresses are answered with another MAC,
// and the re-announcements.
type claimRecorder struct {
	*agenttest.Responder
	claimed     map[netip.Addr]bool
	reannounced []netip.Addr
}

func (r *claimRecorder) Update(cs []responder.Change) {
	if r.claimed == nil {
		r.claimed = map[netip.Addr]bool{}
	}
	for _, c := range cs {
		r.claimed[c.Addr] = c.On && bytes.Equal(c.Claim, node2MAC)
	}
	r.Responder.Update(cs)
}

func (r *claimRecorder) Reannounce(_ int, a netip.Addr) {
	r.reannounced = append(r.reannounced, a)
	slices.SortFunc(r.reannounced, netip.Addr.Compare)
}

func (r *claimRecorder) claimedNow() []netip.Addr {
	var out []netip.Addr
	for a, on := range r.claimed {
		if on {
			out = append(out, a)
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}
