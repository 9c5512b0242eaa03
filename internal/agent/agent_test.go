package agent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
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
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/responder"
)

type fakeMembers struct {
	mu      sync.Mutex
	members []string
	peers   []string
	changes chan struct{}
}

func (f *fakeMembers) Members() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.members)
}
func (f *fakeMembers) Changes() <-chan struct{} { return f.changes }
func (f *fakeMembers) SetPeers(p []string)      { f.mu.Lock(); f.peers = p; f.mu.Unlock() }
func (f *fakeMembers) set(m ...string)          { f.mu.Lock(); f.members = m; f.mu.Unlock(); poke(f.changes) }

type fakeResponder struct {
	mu    sync.Mutex
	table map[int][]netip.Addr
}

func (f *fakeResponder) Apply(d map[int][]netip.Addr) { f.mu.Lock(); f.table = d; f.mu.Unlock() }

// Update changes the table as responder.Manager does; an interface left
// with no address disappears from it.
func (f *fakeResponder) Update(cs []responder.Change) {
	f.mu.Lock()
	defer f.mu.Unlock()
	next := map[int][]netip.Addr{}
	for i, addrs := range f.table {
		next[i] = slices.Clone(addrs)
	}
	for _, c := range cs {
		next[c.IfIndex] = slices.DeleteFunc(next[c.IfIndex], func(a netip.Addr) bool { return a == c.Addr })
		if c.On {
			next[c.IfIndex] = append(next[c.IfIndex], c.Addr)
			slices.SortFunc(next[c.IfIndex], netip.Addr.Compare)
		}
		if len(next[c.IfIndex]) == 0 {
			delete(next, c.IfIndex)
		}
	}
	f.table = next
}
func (f *fakeResponder) get() map[int][]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.table
}

type fakeLinks struct {
	addrs    []announce.LocalAddr
	prefixes map[int][]netip.Prefix
}

func (fakeLinks) Interfaces() ([]announce.Interface, error) {
	return []announce.Interface{{Name: "lo", Index: 1, Loopback: true}, {Name: "eth0", Index: 2}}, nil
}
func (f fakeLinks) Addrs() ([]announce.LocalAddr, error)      { return f.addrs, nil }
func (fakeLinks) Watch(ctx context.Context, _ func()) error   { <-ctx.Done(); return nil }
func (f fakeLinks) Prefixes() (map[int][]netip.Prefix, error) { return f.prefixes, nil }

type fakeSysctls map[string]int

func (f fakeSysctls) ArpIgnore(name string) (int, error) { return f[name], nil }

type fakeProber map[netip.Addr][]net.HardwareAddr

func (f fakeProber) Probe(_ context.Context, _ int, addrs []netip.Addr, _ time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	out := map[netip.Addr][]net.HardwareAddr{}
	for _, a := range addrs {
		out[a] = f[a]
	}
	return out, nil
}

func testNode(name string) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
}

// fixture: three nodes, one policy, one Service with one address; the
// agent runs as the address's owner.
func fixture(t *testing.T) (*Agent, client.Client, *fakeMembers, *fakeResponder, string) {
	t.Helper()
	const vip = "10.213.0.100"
	owner := announce.Rank([]string{"node-1", "node-2", "node-3"}, ip(vip))[0]
	svc := lbService("default", "web", vip)
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).
		WithObjects(testNode("node-1"), testNode("node-2"), testNode("node-3"), &svc,
			&mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}).
		WithStatusSubresource(&mooringv1.L2AnnouncementPolicy{}, &mooringv1.L2Announcer{}).
		WithIndex(&discoveryv1.EndpointSlice{}, indexSliceService, sliceService).Build()
	mem := &fakeMembers{members: []string{"node-1", "node-2", "node-3"}, changes: make(chan struct{}, 1)}
	resp := &fakeResponder{}
	cfg := DefaultConfig()
	cfg.NodeName = owner
	a := New(cfg, Deps{Reader: c, Client: c, Members: mem, Responder: resp, Links: fakeLinks{},
		Sysctls: fakeSysctls{}, Registerer: prometheus.NewRegistry()})
	return a, c, mem, resp, owner
}

func TestDecideAppliesTableAndFailsOver(t *testing.T) {
	a, _, mem, resp, owner := fixture(t)
	ctx := context.Background()
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if want := map[int][]netip.Addr{2: {ip("10.213.0.100")}}; !reflect.DeepEqual(resp.get(), want) {
		t.Fatalf("table %v, want %v", resp.get(), want)
	}
	if got := value(a.met.owned); got != 1 {
		t.Fatalf("addresses owned metric %v", got)
	}
	// The owner is seen dead by another agent: that one takes over, with
	// no API call needed.
	others := slices.DeleteFunc([]string{"node-1", "node-2", "node-3"}, func(n string) bool { return n == owner })
	b, _, _, respB, _ := fixture(t)
	b.cfg.NodeName = announce.Rank(others, ip("10.213.0.100"))[0]
	b.deps.Members.(*fakeMembers).set(others...)
	if err := b.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if len(respB.get()[2]) != 1 {
		t.Fatalf("runner-up %s did not take over: %v", b.cfg.NodeName, respB.get())
	}
	// And the old owner, cut off and seeing only itself, keeps announcing:
	// harmless on a dead link, and right if it was the others that died.
	mem.set(owner)
	if err := a.decide(ctx); err != nil || len(resp.get()[2]) != 1 {
		t.Fatalf("isolated owner table %v, err %v", resp.get(), err)
	}
}

// A new Service costs the agents no write; the node's own L2Announcer is
// written when its view changes, and a move records one Event, by the new
// owner.
func TestStatusWriterWritesOnlyItsOwnObjectOnChange(t *testing.T) {
	a, c, mem, _, owner := fixture(t)
	ctx := context.Background()
	w := &statusWriter{reader: c, c: c, rec: a.rec, clock: a.deps.Clock, node: owner, log: a.log, met: a.met, in: a.toStatus,
		events: a.events, patched: map[string]string{}}
	sync := func() {
		t.Helper()
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
		d, _ := a.toStatus.get()
		for range 3 { // repeated syncs must not write again
			if err := w.sync(ctx, d); err != nil {
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
	writes := func() float64 { return value(a.met.apiWrites.WithLabelValues("announcer", "ok")) }
	if got := writes(); got != 2 {
		t.Fatalf("announcer writes %v, want 2 (create, status)", got)
	}
	// A new Service announced by this node: no write at all.
	for i := range 20 {
		svc := lbService("default", fmt.Sprintf("new-%d", i), fmt.Sprintf("10.213.2.%d", i))
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
	mem.set(owner, others[0])
	sync()
	if writes() != 3 {
		t.Fatalf("announcer writes %v after a member left, want 3", writes())
	}
	moved := 0
	for _, o := range a.prev.Owners {
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
	a.deps.Links = fakeLinks{prefixes: map[int][]netip.Prefix{
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
	if err := c.Delete(ctx, testNode(owner)); err != nil {
		t.Fatal(err)
	}
	w := &statusWriter{reader: c, c: c, rec: a.rec, clock: a.deps.Clock, node: owner, log: a.log, met: a.met, in: a.toStatus,
		events: a.events, patched: map[string]string{}}
	sync := func() {
		t.Helper()
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
		d, ok := a.toStatus.get()
		if !ok {
			t.Fatal("no decision published")
		}
		if err := w.sync(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	sync()
	var anns mooringv1.L2AnnouncerList
	if err := c.List(ctx, &anns); err != nil || len(anns.Items) != 0 {
		t.Fatalf("L2Announcers without a Node: %+v (%v)", anns.Items, err)
	}
	if got := value(a.met.apiWrites.WithLabelValues("announcer", "ok")); got != 0 {
		t.Fatalf("announcer writes %v without a Node, want 0", got)
	}
	node := testNode(owner)
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
	a.deps.Links = fakeLinks{addrs: []announce.LocalAddr{{Addr: ip("10.213.0.100"), IfIndex: 1, IfName: "lo"}}}
	a.deps.Sysctls = fakeSysctls{"all": 0, "eth0": 0}
	a.deps.Prober = fakeProber{ip("10.213.0.100"): {net.HardwareAddr{2, 0, 0, 0, 0, 9}}}
	a.cfg.SafetyInterval, a.cfg.ProbeInterval = 20*time.Millisecond, 20*time.Millisecond
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(5 * time.Second)
	for value(a.met.stale) != 1 || value(a.met.splitBrain) != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("stale %v, split brain %v", value(a.met.stale), value(a.met.splitBrain))
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
