package agent

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/eligibility"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/membership"
)

// gossipMembers is agenttest.Members with metadata, like membership.Membership.
type gossipMembers struct {
	*fakeMembers
	mu    sync.Mutex
	metas map[string]membership.NodeMeta // absent: publishes nothing (older agent)
	mine  membership.NodeMeta
	gen   uint64
}

func (g *gossipMembers) Snapshot() []membership.Member {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []membership.Member
	for _, n := range g.Members() {
		m := membership.Member{Name: n}
		if meta, ok := g.metas[n]; ok {
			m.Meta = meta
		} else {
			m.MetaErr = membership.ErrNoMeta
		}
		out = append(out, m)
	}
	return out
}

// Generation changes on every call: the agent recomputes every time.
func (g *gossipMembers) Generation() uint64 { g.gen++; return g.gen }

func (g *gossipMembers) SetMeta(m membership.NodeMeta) error {
	g.mu.Lock()
	g.mine = m
	g.mu.Unlock()
	return nil
}

// inspectLinks is agenttest.Links that can describe links.
type inspectLinks struct {
	agenttest.Links
	links []host.LinkInfo
}

func (l inspectLinks) Interfaces() ([]announce.Interface, error) {
	var out []announce.Interface
	for _, li := range l.links {
		out = append(out, announce.Interface{Name: li.Name, Index: li.Index, Loopback: li.Loopback})
	}
	return out, nil
}
func (l inspectLinks) Inspect() ([]host.LinkInfo, error) { return l.links, nil }

func ready(ifs ...string) membership.NodeMeta {
	return membership.NodeMeta{Ranking: announce.RankingVersion(), Ready: true, Interfaces: ifs, Defaults: ifs[:1]}
}

// eligibilityFixture: node-1..3, a policy for eth0 only and eight
// addresses; the agent runs as local, whose links are given.
func eligibilityFixture(t *testing.T, local string, links []host.LinkInfo, metas map[string]membership.NodeMeta, nodes ...*corev1.Node) (*Agent, client.Client, *gossipMembers, *agenttest.Responder, []netip.Addr) {
	t.Helper()
	objs := []client.Object{&mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "eth0-only"},
		Spec: mooringv1.L2AnnouncementPolicySpec{Interfaces: []string{"eth0"}}}}
	for _, n := range nodes {
		objs = append(objs, n)
	}
	var vips []netip.Addr
	for i := range 8 {
		a := netip.AddrFrom4([4]byte{10, 213, 0, byte(100 + i)})
		vips = append(vips, a)
		svc := agenttest.LBService("default", "web-"+a.String(), a.String())
		objs = append(objs, &svc)
	}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).
		WithStatusSubresource(&mooringv1.L2AnnouncementPolicy{}).Build()
	mem := &gossipMembers{fakeMembers: agenttest.NewMembers([]string{"node-1", "node-2", "node-3"}...), metas: metas}
	resp := &agenttest.Responder{}
	cfg := DefaultConfig()
	cfg.NodeName = local
	cfg.TakeDelay = 0   // TestHoldDownAfterRestart tests it
	cfg.TakeMaxWait = 0 // static peers never confirm (take_confirm_test.go)
	a := New(cfg, Deps{Reader: c, Client: c, Members: mem, Responder: resp, Links: inspectLinks{links: links},
		Sysctls: agenttest.Sysctls{}, Registerer: prometheus.NewRegistry()})
	return a, c, mem, resp, vips
}

var (
	eth0 = host.LinkInfo{Name: "eth0", Index: 2, Up: true, Ethernet: true, DefaultRoute: true}
	eth1 = host.LinkInfo{Name: "eth1", Index: 3, Up: true, Ethernet: true, DefaultRoute: true}
)

// The black hole, closed: node-3 has no eth0. It owns none of the policy's
// addresses (every agent agrees, from its published metadata), says why in
// a metric and a Node Event, and node-1 and node-2 serve all of them.
func TestNodeWithoutMatchingInterfaceOwnsNothing(t *testing.T) {
	metas := map[string]membership.NodeMeta{"node-1": ready("eth0"), "node-2": ready("eth0", "eth1"), "node-3": ready("eth1")}
	owners := map[string][]string{}
	for _, local := range []string{"node-1", "node-2", "node-3"} {
		links := []host.LinkInfo{eth0, eth1}
		if local == "node-3" {
			links = []host.LinkInfo{eth1}
		}
		a, c, mem, resp, vips := eligibilityFixture(t, local, links, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- a.elig.RunEvents(ctx, c, a.deps.Clock) }()
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
		for _, v := range vips {
			if o, _ := a.loop.prev.OwnerOf(v); true {
				owners[v.String()] = append(owners[v.String()], o)
				if want := announce.Rank([]string{"node-1", "node-2"}, v)[0]; o != want {
					t.Errorf("%s decides %s owns %s, want %s", local, o, v, want)
				}
			}
		}
		for _, addrs := range resp.Table() {
			if local == "node-3" && len(addrs) > 0 {
				t.Errorf("node-3 answers for %v", addrs)
			}
		}
		if !mem.mine.Ready || (local == "node-3") != slices.Equal(mem.mine.Interfaces, []string{"eth1"}) {
			t.Errorf("%s published %+v", local, mem.mine)
		}
		wantUnservable := 0.0
		if local == "node-3" {
			wantUnservable = 1
			var evs corev1.EventList
			deadline := time.Now().Add(5 * time.Second)
			for len(evs.Items) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
				_ = c.List(ctx, &evs)
			}
			if len(evs.Items) != 1 || evs.Items[0].Reason != eligibility.EventReasonCannotAnnounce || evs.Items[0].InvolvedObject.Kind != "Node" ||
				!strings.Contains(evs.Items[0].Message, "eth0-only") {
				t.Errorf("node-3 events: %+v", evs.Items)
			}
		}
		if got := gathered(a, "mooring_agent_unservable_policies"); got != wantUnservable {
			t.Errorf("%s: unservable policies %v, want %v", local, got, wantUnservable)
		}
		cancel()
		<-done
	}
}

// Who counts as a candidate: a member that is not ready does not, one with
// the exclude-from-external-load-balancers label does not, and neither
// does a member that publishes no metadata (an agent older than v0.1.0 or
// a foreign member: issue 19 — it must not be a candidate for everything).
func TestCandidates(t *testing.T) {
	excluded := agenttest.Node("node-3")
	excluded.Labels = map[string]string{corev1.LabelNodeExcludeBalancers: ""}
	notReady := ready("eth0")
	notReady.Ready = false
	otherRanking := ready("eth0")
	otherRanking.Ranking = "mooring-hrw-v0"
	for _, tc := range []struct {
		name  string
		metas map[string]membership.NodeMeta
		want  []string
	}{
		{"not ready", map[string]membership.NodeMeta{"node-1": ready("eth0"), "node-2": notReady}, []string{"node-1"}},
		{"no metadata", map[string]membership.NodeMeta{"node-1": ready("eth0")}, []string{"node-1"}},
		{"another ranking", map[string]membership.NodeMeta{"node-1": ready("eth0"), "node-2": otherRanking}, []string{"node-1", "node-2"}},
	} {
		a, _, _, _, _ := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, tc.metas, agenttest.Node("node-1"), agenttest.Node("node-2"), excluded)
		caps, err := a.capabilities(context.Background(), changed{all: true})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for n := range caps {
			got = append(got, n)
		}
		slices.Sort(got)
		if !slices.Equal(got, tc.want) {
			t.Errorf("%s: candidates %v, want %v", tc.name, got, tc.want)
		}
		// A mixed-version cluster is reported.
		if got, want := gathered(a, "mooring_agent_members_other_ranking"), b2f(tc.name == "another ranking"); got != want {
			t.Errorf("%s: members with another ranking %v, want %v", tc.name, got, want)
		}
	}
}

// The start-up gate: an agent that knows peers but has not reached one
// announces nothing (it would believe itself alone and claim every
// address) until gossip finds a peer or SettleTimeout passes.
func TestStartupGateKeepsANewAgentQuiet(t *testing.T) {
	metas := map[string]membership.NodeMeta{"node-1": ready("eth0"), "node-2": ready("eth0"), "node-3": ready("eth0")}
	nodes := func() []*corev1.Node {
		var out []*corev1.Node
		for i, n := range []string{"node-1", "node-2", "node-3"} {
			node := agenttest.Node(n)
			node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: netip.AddrFrom4([4]byte{10, 213, 0, byte(11 + i)}).String()}}
			out = append(out, node)
		}
		return out
	}
	a, _, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, nodes()...)
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	a.deps.Clock = clk
	mem.Set("node-1") // alone so far
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.decideLoop(ctx) }()
	time.Sleep(200 * time.Millisecond)
	if got := resp.Table(); got != nil {
		t.Fatalf("announced %v before gossip found a peer", got)
	}
	if mem.mine.Ready {
		t.Fatal("published ready before deciding")
	}
	if _, err := a.readyz(); err == nil || !strings.Contains(err.Error(), "not deciding yet") || !strings.Contains(err.Error(), "reaches none of the 2") {
		t.Fatalf("/readyz during the gate: %v", err)
	}
	mem.Set("node-1", "node-2", "node-3")
	wantOwned := 0
	for _, v := range vips {
		if announce.Rank([]string{"node-1", "node-2", "node-3"}, v)[0] == "node-1" {
			wantOwned++
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for resp.Table() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(resp.Table()[eth0.Index]); got != wantOwned {
		t.Fatalf("after the peers arrived: %d addresses, want node-1's share %d", got, wantOwned)
	}
	if _, err := a.readyz(); err != nil {
		t.Fatalf("/readyz once serving: %v", err)
	}
	cancel()
	if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}

	// Alone for good: after SettleTimeout it announces with what it knows.
	b, _, memB, respB, _ := eligibilityFixture(t, "node-2", []host.LinkInfo{eth0}, metas, nodes()...)
	clkB := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	b.deps.Clock = clkB
	memB.Set("node-2")
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	go func() { _ = b.decideLoop(ctx2) }()
	for !clkB.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	if respB.Table() != nil {
		t.Fatal("announced before SettleTimeout")
	}
	clkB.Step(b.cfg.SettleTimeout)
	deadline = time.Now().Add(5 * time.Second)
	for respB.Table() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(respB.Table()[eth0.Index]); got != len(vips) {
		t.Fatalf("alone after the timeout: %d addresses, want all %d", got, len(vips))
	}
}

// Coming back to a cluster that has served without it, an agent holds back
// for --hold-down before it is a candidate again; at a cold start (no peer
// ready before it) it serves at once (the other tests).
func TestHoldDownAfterRestart(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	old := func(ifs ...string) membership.NodeMeta {
		m := ready(ifs...)
		m.Since = clk.Now().Add(-time.Hour).Unix()
		return m
	}
	metas := map[string]membership.NodeMeta{"node-2": old("eth0"), "node-3": old("eth0")}
	a, _, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
	a.deps.Clock = clk
	a.cfg.TakeDelay = 500 * time.Millisecond // published ready first, takes later
	reconfigured(a)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() { _ = a.decideLoop(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for resp.Table() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if got := len(resp.Table()[eth0.Index]); got != 0 {
		t.Fatalf("answers for %d addresses during the hold-down", got)
	}
	mem.mu.Lock()
	held := mem.mine
	mem.mu.Unlock()
	if held.Ready || !strings.Contains(held.Reason, "holding down") {
		t.Fatalf("published %+v during the hold-down", held)
	}
	wantOwned := 0
	for _, v := range vips {
		if announce.Rank([]string{"node-1", "node-2", "node-3"}, v)[0] == "node-1" {
			wantOwned++
		}
	}
	for !clk.HasWaiters() {
		time.Sleep(time.Millisecond)
	}
	clk.Step(a.cfg.HoldDown)
	deadline = time.Now().Add(5 * time.Second)
	for len(resp.Table()[eth0.Index]) != wantOwned && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
		clk.Step(10 * time.Millisecond) // the decision loop's coalescing window
	}
	if got := len(resp.Table()[eth0.Index]); got != wantOwned {
		t.Fatalf("after the hold-down: %d addresses, want node-1's share %d", got, wantOwned)
	}
	mem.mu.Lock()
	defer mem.mu.Unlock()
	if !mem.mine.Ready || mem.mine.Since == 0 {
		t.Fatalf("published %+v after the hold-down", mem.mine)
	}
}
