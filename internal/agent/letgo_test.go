package agent

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
)

// Make before break when this node stops serving (handing.go, leave.go):
// excluded by the label, or leaving (SIGTERM), node-1 publishes that it is
// no candidate only once its responder answers every address that goes to
// node-2 with node-2's MAC (its kernel has it as a neighbour); it answers
// them so for LetGoWait, while node-2 takes them, then lets go. An address
// that goes to node-3, whose MAC it does not know, is let go at once, as
// before. Without the hand-over node-1 let go of all at once, and peers
// took a gossip round later.
func TestLetGoAnswersWithNewOwnersMAC(t *testing.T) {
	for _, how := range []string{"excluded", "leaving"} {
		t.Run(how, func(t *testing.T) {
			metas := map[string]membership.NodeMeta{"node-2": withHW(ready("eth0")), "node-3": ready("eth0")}
			a, c, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
			rec := &claimRecorder{Responder: resp}
			a.deps.Responder = rec
			a.deps.Links = neighbourLinks{inspectLinks: inspectLinks{links: []host.LinkInfo{eth0}}, known: true}
			// When node-1 publishes that it no longer serves, what does its
			// responder answer, and with whose MAC?
			var atPublish, claimedAtPublish []netip.Addr
			a.deps.Members = &publishHook{gossipMembers: mem, hook: func(m membership.NodeMeta) {
				if !m.Ready && atPublish == nil {
					atPublish, claimedAtPublish = answersOn(rec), rec.claimedNow()
				}
			}}
			clk := clocktesting.NewFakeClock(time.Now())
			a.deps.Clock = clk
			decide := func() {
				t.Helper()
				a.Trigger()
				if err := a.decide(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			decide()
			own := answersOn(rec)
			var toNode2 []netip.Addr
			for _, v := range own {
				if announce.Rank([]string{"node-2", "node-3"}, v)[0] == "node-2" {
					toNode2 = append(toNode2, v)
				}
			}
			if len(toNode2) == 0 || len(toNode2) == len(own) {
				t.Fatalf("fixture: node-1 answers %v, of which %v go to node-2: want some to each peer (of %d)", own, toNode2, len(vips))
			}

			if how == "excluded" {
				var n corev1.Node
				if err := c.Get(context.Background(), types.NamespacedName{Name: "node-1"}, &n); err != nil {
					t.Fatal(err)
				}
				n.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: ""}
				if err := c.Update(context.Background(), &n); err != nil {
					t.Fatal(err)
				}
			} else {
				a.leave.begin()
			}
			decide()
			if !slices.Equal(atPublish, toNode2) || !slices.Equal(claimedAtPublish, toNode2) {
				t.Fatalf("when node-1 published that it stops serving it answered %v, %v with node-2's MAC; want %v, all with node-2's MAC (answered first, then published)",
					atPublish, claimedAtPublish, toNode2)
			}
			if mem.mine.Ready || mem.mine.Leaving != (how == "leaving") {
				t.Fatalf("node-1 publishes %+v", mem.mine)
			}
			if got := counterValue(a.met.letGo); got != float64(len(toNode2)) {
				t.Fatalf("mooring_agent_let_go_total = %v, want %d", got, len(toNode2))
			}
			clk.Step(a.cfg.LetGoWait / 2)
			decide()
			if got := answersOn(rec); !slices.Equal(got, toNode2) {
				t.Fatalf("half-way through the let-go wait node-1 answers %v, want %v", got, toNode2)
			}
			clk.Step(a.cfg.LetGoWait/2 + time.Millisecond)
			decide()
			if got := answersOn(rec); len(got) > 0 {
				t.Fatalf("after the let-go wait node-1 still answers %v", got)
			}
		})
	}
}

// publishHook calls hook with every metadata node-1 publishes.
type publishHook struct {
	*gossipMembers
	hook func(membership.NodeMeta)
}

func (p *publishHook) SetMeta(m membership.NodeMeta) error {
	p.hook(m)
	return p.gossipMembers.SetMeta(m)
}

// answersOn is what r's responder answers on eth0, sorted.
func answersOn(r *claimRecorder) []netip.Addr {
	got := slices.Clone(r.Table()[eth0.Index])
	slices.SortFunc(got, netip.Addr.Compare)
	return got
}
