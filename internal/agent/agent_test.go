package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/agent/store"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/kube"
)

// fixture: three nodes, one policy, one Service with one address; the
// agent runs as the address's owner.
func fixture(t *testing.T) (*Agent, client.Client, *agenttest.Members, *agenttest.Responder, string) {
	t.Helper()
	const vip = "10.213.0.100"
	owner := announce.Rank([]string{"node-1", "node-2", "node-3"}, ip(vip))[0]
	svc := agenttest.LBService("default", "web", vip)
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).
		WithObjects(agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"), &svc,
			&mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}).
		WithStatusSubresource(&mooringv1.L2AnnouncementPolicy{}, &mooringv1.L2Announcer{}).
		WithIndex(&discoveryv1.EndpointSlice{}, store.IndexSliceService, store.SliceService).Build()
	mem := agenttest.NewMembers([]string{"node-1", "node-2", "node-3"}...)
	resp := &agenttest.Responder{}
	cfg := DefaultConfig()
	cfg.NodeName = owner
	a := New(cfg, Deps{Reader: c, Client: c, Members: mem, Responder: resp, Links: agenttest.Links{},
		Sysctls: agenttest.Sysctls{}, Registerer: prometheus.NewRegistry()})
	return a, c, mem, resp, owner
}

func TestDecideAppliesTableAndFailsOver(t *testing.T) {
	a, _, mem, resp, owner := fixture(t)
	ctx := context.Background()
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if want := map[int][]netip.Addr{2: {ip("10.213.0.100")}}; !reflect.DeepEqual(resp.Table(), want) {
		t.Fatalf("table %v, want %v", resp.Table(), want)
	}
	if got := value(a.met.owned); got != 1 {
		t.Fatalf("addresses owned metric %v", got)
	}
	// The owner is seen dead by another agent: that one takes over, with
	// no API call needed.
	others := slices.DeleteFunc([]string{"node-1", "node-2", "node-3"}, func(n string) bool { return n == owner })
	b, _, _, respB, _ := fixture(t)
	b.cfg.NodeName = announce.Rank(others, ip("10.213.0.100"))[0]
	b.deps.Members.(*agenttest.Members).Set(others...)
	if err := b.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if len(respB.Table()[2]) != 1 {
		t.Fatalf("runner-up %s did not take over: %v", b.cfg.NodeName, respB.Table())
	}
	// And the old owner, cut off and seeing only itself, keeps announcing:
	// harmless on a dead link, and right if it was the others that died.
	mem.Set(owner)
	if err := a.decide(ctx); err != nil || len(resp.Table()[2]) != 1 {
		t.Fatalf("isolated owner table %v, err %v", resp.Table(), err)
	}
}

// A new Service costs the agents no write; the node's own L2Announcer is
// written when its view changes, and a move records one Event, by the new
// owner.
func TestStatusWriterWritesOnlyItsOwnObjectOnChange(t *testing.T) {
	a, c, mem, _, owner := fixture(t)
	ctx := context.Background()
	w := status.NewWriter(c, a.rec, a.deps.Clock, a.toStatus, a.events)
	sync := func() {
		t.Helper()
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
		d, _ := a.toStatus.Get()
		for range 3 { // repeated syncs must not write again
			if err := w.Sync(ctx, d); err != nil {
				t.Fatal(err)
			}
		}
	}
	sync()
	var ann mooringv1.L2Announcer
	if err := c.Get(ctx, types.NamespacedName{Name: owner}, &ann); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(ann.Status.Members, []string{"node-1", "node-2", "node-3"}) || len(ann.Status.Interfaces) != 1 || ann.Status.ProblemCount != 0 {
		t.Fatalf("L2Announcer status %+v", ann.Status)
	}
	// The configuration it decided with: every policy and its generation.
	var pols mooringv1.L2AnnouncementPolicyList
	if err := c.List(ctx, &pols); err != nil {
		t.Fatal(err)
	}
	if ann.Status.Applied == nil || len(ann.Status.Applied.Policies) != len(pols.Items) || len(pols.Items) == 0 {
		t.Fatalf("applied configuration %+v, policies %d", ann.Status.Applied, len(pols.Items))
	}
	for _, p := range pols.Items {
		if !slices.Contains(ann.Status.Applied.Policies, mooringv1.AppliedGeneration{Name: p.Name, Generation: p.Generation}) {
			t.Errorf("policy %s generation %d not in %+v", p.Name, p.Generation, ann.Status.Applied.Policies)
		}
	}
	writes := func() float64 { return value(a.met.writes.Counter("announcer", "ok")) }
	if got := writes(); got != 2 {
		t.Fatalf("announcer writes %v, want 2 (create, status)", got)
	}
	// A new Service announced by this node: no write at all.
	for i := range 20 {
		svc := agenttest.LBService("default", fmt.Sprintf("new-%d", i), fmt.Sprintf("10.213.2.%d", i))
		if err := c.Create(ctx, &svc); err != nil {
			t.Fatal(err)
		}
		a.dirty.service(types.NamespacedName{Namespace: "default", Name: svc.Name})
	}
	sync()
	var evs corev1.EventList
	if err := c.List(ctx, &evs); err != nil || len(evs.Items) != 0 || writes() != 2 {
		t.Fatalf("after new Services: events %+v (%v), announcer writes %v", evs.Items, err, writes())
	}
	var svc corev1.Service
	if err := c.Get(ctx, types.NamespacedName{Namespace: "default", Name: "web"}, &svc); err != nil || len(svc.Annotations) != 0 {
		t.Fatalf("Service written: %+v %v", svc.ObjectMeta, err)
	}
	// The owner of some of them leaves: one status write, one Event per
	// Service moved to this node.
	others := slices.DeleteFunc([]string{"node-1", "node-2", "node-3"}, func(n string) bool { return n == owner })
	mem.Set(owner, others[0])
	sync()
	if writes() != 3 {
		t.Fatalf("announcer writes %v after a member left, want 3", writes())
	}
	moved := 0
	for _, o := range a.loop.prev.Owners {
		if o.Node == owner && announce.Rank([]string{"node-1", "node-2", "node-3"}, o.Addr)[0] == others[1] {
			moved++
		}
	}
	if err := c.List(ctx, &evs); err != nil || len(evs.Items) != moved {
		t.Fatalf("%d events for %d moves: %+v", len(evs.Items), moved, evs.Items)
	}
	for _, e := range evs.Items {
		if e.Reason != mooringv1.EventReasonAnnounced || !strings.Contains(e.Message, "(was "+others[1]+")") {
			t.Fatalf("event %+v", e)
		}
	}
	// An address on the announcing interface: its network is published,
	// once; the loopback's is not (no policy announces there).
	a.deps.Links = agenttest.Links{Nets: map[int][]netip.Prefix{
		1: {netip.MustParsePrefix("127.0.0.1/8")},
		2: {netip.MustParsePrefix("192.168.1.10/24"), netip.MustParsePrefix("fe80::1/64")}}}
	a.dirty.mark(func(c *changed) { c.links = true })
	sync()
	a.dirty.mark(func(c *changed) { c.links = true }) // the same networks again
	sync()
	if err := c.Get(ctx, types.NamespacedName{Name: owner}, &ann); err != nil {
		t.Fatal(err)
	}
	if writes() != 4 || len(ann.Status.Interfaces) != 1 || !slices.Equal(ann.Status.Interfaces[0].Prefixes, []string{"192.168.1.0/24"}) {
		t.Fatalf("after an address change: announcer writes %v, want 4; interfaces %+v", writes(), ann.Status.Interfaces)
	}
}

// An agent whose Node does not exist (a wrong --node-name) writes no
// L2Announcer; once the Node appears, the decision is published at once
// and the L2Announcer is created owned by the Node, so it goes with it.
func TestStatusWriterWaitsForItsNode(t *testing.T) {
	a, c, _, _, owner := fixture(t)
	ctx := context.Background()
	if err := c.Delete(ctx, agenttest.Node(owner)); err != nil {
		t.Fatal(err)
	}
	w := status.NewWriter(c, a.rec, a.deps.Clock, a.toStatus, a.events)
	sync := func() {
		t.Helper()
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
		d, ok := a.toStatus.Get()
		if !ok {
			t.Fatal("no decision published")
		}
		if err := w.Sync(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	var anns mooringv1.L2AnnouncerList
	if err := c.List(ctx, &anns); err != nil || len(anns.Items) != 0 {
		t.Fatalf("L2Announcers without a Node: %+v (%v)", anns.Items, err)
	}
	if got := value(a.met.writes.Counter("announcer", "ok")); got != 0 {
		t.Fatalf("announcer writes %v without a Node, want 0", got)
	}
	node := agenttest.Node(owner)
	node.UID = "uid-" + types.UID(owner)
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	a.dirty.mark(func(c *changed) { c.nodes = true })
	sync()
	var ann mooringv1.L2Announcer
	if err := c.Get(ctx, types.NamespacedName{Name: owner}, &ann); err != nil {
		t.Fatal(err)
	}
	want := []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: owner, UID: node.UID, BlockOwnerDeletion: new(bool)}}
	if !reflect.DeepEqual(ann.OwnerReferences, want) || len(ann.Status.Members) == 0 {
		t.Fatalf("L2Announcer owners %+v, status %+v", ann.OwnerReferences, ann.Status)
	}
}

func TestStaleAndSplitBrainReported(t *testing.T) {
	a, c, _, _, _ := fixture(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	a.deps.Links = agenttest.Links{LocalAddrs: []announce.LocalAddr{{Addr: ip("10.213.0.100"), IfIndex: 1, IfName: "lo"}}}
	a.deps.Sysctls = agenttest.Sysctls{"all": 0, "eth0": 0}
	a.deps.Prober = agenttest.Prober{ip("10.213.0.100"): {net.HardwareAddr{2, 0, 0, 0, 0, 9}}}
	a.cfg.SafetyInterval, a.cfg.ProbeInterval = 20*time.Millisecond, 20*time.Millisecond
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for value(a.safetyMet.Stale) != 1 || value(a.safetyMet.SplitBrain) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stale %v, split brain %v", value(a.safetyMet.Stale), value(a.safetyMet.SplitBrain))
		}
		time.Sleep(10 * time.Millisecond)
	}
	reasons := map[string]int{}
	for time.Now().Before(deadline) {
		var evs corev1.EventList
		if err := c.List(ctx, &evs); err != nil {
			t.Fatal(err)
		}
		clear(reasons)
		for _, e := range evs.Items {
			reasons[e.Reason]++
		}
		if reasons[mooringv1.EventReasonStaleLocalAddress] > 0 && reasons[mooringv1.EventReasonSplitBrain] > 0 {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // more rounds must not repeat the events
	var evs corev1.EventList
	_ = c.List(ctx, &evs)
	clear(reasons)
	for _, e := range evs.Items {
		reasons[e.Reason]++
	}
	if reasons[mooringv1.EventReasonStaleLocalAddress] != 1 || reasons[mooringv1.EventReasonSplitBrain] != 1 {
		t.Fatalf("events by reason %v, want one stale and one split brain", reasons)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// value reads a gauge or counter.
func value(c prometheus.Metric) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	if m.Gauge != nil {
		return m.Gauge.GetValue()
	}
	return m.Counter.GetValue()
}
