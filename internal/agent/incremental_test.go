package agent

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/announce"
)

// fullDecision is the oracle: every object in the cache converted and
// decided at once.
func fullDecision(t *testing.T, a *Agent, c client.Reader) announce.Result {
	t.Helper()
	ctx := context.Background()
	var (
		pols  mooringv1.L2AnnouncementPolicyList
		svcs  corev1.ServiceList
		es    discoveryv1.EndpointSliceList
		nodes corev1.NodeList
	)
	for _, l := range []client.ObjectList{&pols, &svcs, &es, &nodes} {
		if err := c.List(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	in := convert.Input(convert.Objects{Policies: pols.Items, Services: svcs.Items, Slices: es.Items, Nodes: nodes.Items})
	in.Members, in.Local = a.deps.Members.Members(), a.cfg.NodeName
	in.Interfaces, _ = a.deps.Links.Interfaces()
	return announce.Decide(in)
}

// Service and EndpointSlice events, each re-deciding only its Service,
// leave the agent where a full recompute of the cache would.
func TestIncrementalDecisionsMatchFullRecompute(t *testing.T) {
	a, c, mem, _, _ := fixture(t)
	ctx := context.Background()
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewSource(3))
	for round := range 8 {
		for i := range 20 {
			name := fmt.Sprintf("s%d", r.Intn(30))
			k := types.NamespacedName{Namespace: "default", Name: name}
			switch r.Intn(4) {
			case 0:
				_ = c.Delete(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}})
			case 1:
				es := &discoveryv1.EndpointSlice{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name + "-x",
					Labels: map[string]string{discoveryv1.LabelServiceName: name}}, AddressType: discoveryv1.AddressTypeIPv4}
				for _, n := range []string{"node-1", "node-2", "node-3"} {
					if r.Intn(2) == 0 {
						es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{"10.1.0.1"}, NodeName: ptr.To(n)})
					}
				}
				_ = c.Delete(ctx, es)
				if err := c.Create(ctx, es); err != nil {
					t.Fatal(err)
				}
			default:
				svc := agenttest.LBService("default", name, fmt.Sprintf("10.213.1.%d", r.Intn(40)))
				if r.Intn(2) == 0 {
					svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
				}
				_ = c.Delete(ctx, &svc)
				if err := c.Create(ctx, &svc); err != nil {
					t.Fatal(err)
				}
			}
			a.dirty.service(k)
			if i%7 == 0 {
				if err := a.decide(ctx); err != nil {
					t.Fatal(err)
				}
			}
		}
		if round == 4 {
			mem.Set("node-1", "node-3")
		}
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
		if want, got := fullDecision(t, a, c), a.loop.state.Result(); !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: incremental\n%+v\nfull\n%+v", round, got, want)
		}
	}
}

// An agent whose --node-name matches no Node says so: not ready, and one
// Event on the Node when it appears.
func TestMissingNode(t *testing.T) {
	a, c, _, _, _ := fixture(t)
	a.cfg.NodeName = "node-9"
	a.rec.Node = "node-9"
	ctx := context.Background()
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Ready(); err == nil {
		t.Fatal("ready without a Node")
	}
	if err := c.Create(ctx, agenttest.Node("node-9")); err != nil {
		t.Fatal(err)
	}
	a.Trigger()
	for range 2 {
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Ready(); err != nil {
		t.Fatal(err)
	}
	var evs corev1.EventList
	if err := c.List(ctx, &evs); err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range evs.Items {
		if e.Reason == eventReasonNodeAppeared && e.InvolvedObject.Kind == "Node" && e.InvolvedObject.Name == "node-9" {
			n++
		}
	}
	if n != 1 {
		t.Fatalf("%d NodeAppeared events, want 1: %+v", n, evs.Items)
	}
}

// Who announces follows from the API objects and the nodes' L2Announcers;
// a dead node's stale L2Announcer does not count.
func TestAnnouncements(t *testing.T) {
	a, c, _, _, owner := fixture(t)
	ctx := context.Background()
	three := []string{"node-1", "node-2", "node-3"}
	for _, n := range three {
		ann := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: n}}
		if err := c.Create(ctx, ann); err != nil {
			t.Fatal(err)
		}
		ann.Status = mooringv1.L2AnnouncerStatus{Members: three, Interfaces: []mooringv1.AnnouncerInterface{{Name: "eth0", Index: 2}}}
		if err := c.Status().Update(ctx, ann); err != nil {
			t.Fatal(err)
		}
	}
	got, err := status.Announcements(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Node != owner || !slices.Equal(got[0].Interfaces, []string{"eth0"}) ||
		!slices.Equal(got[0].Claimants, []string{owner}) || got[0].Reason != "" {
		t.Fatalf("announcements %+v, want %s on eth0", got, owner)
	}
	// The owner dies: the others' views drop it, its own stays stale.
	var rest []string
	for _, n := range three {
		if n != owner {
			rest = append(rest, n)
		}
	}
	for _, n := range rest {
		var ann mooringv1.L2Announcer
		if err := c.Get(ctx, types.NamespacedName{Name: n}, &ann); err != nil {
			t.Fatal(err)
		}
		ann.Status.Members = rest
		if err := c.Status().Update(ctx, &ann); err != nil {
			t.Fatal(err)
		}
	}
	got, err = status.Announcements(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	want := announce.Rank(rest, ip("10.213.0.100"))[0]
	if len(got) != 1 || got[0].Node != want || !slices.Equal(got[0].Claimants, []string{want}) || got[0].Reason != "" {
		t.Fatalf("after %s died: %+v, want %s", owner, got, want)
	}
	// Published capabilities limit the nodes as in the agents' decision:
	// the would-be owner cannot serve a policy without interfaces (no
	// default interface), so the other survivor announces.
	for _, n := range rest {
		var ann mooringv1.L2Announcer
		if err := c.Get(ctx, types.NamespacedName{Name: n}, &ann); err != nil {
			t.Fatal(err)
		}
		ann.Status.Capability = &mooringv1.AnnouncerCapability{Interfaces: []string{"eth0"}, Defaults: []string{"eth0"}}
		if n == want {
			ann.Status.Capability.Defaults = nil
		}
		if err := c.Status().Update(ctx, &ann); err != nil {
			t.Fatal(err)
		}
	}
	got, err = status.Announcements(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if other := slices.DeleteFunc(slices.Clone(rest), func(n string) bool { return n == want })[0]; len(got) != 1 || got[0].Node != other ||
		!slices.Equal(got[0].Interfaces, []string{"eth0"}) {
		t.Fatalf("with capabilities: %+v, want %s on eth0", got, other)
	}
	_ = a
}

// New addresses alone publish the decision at most every publishEvery; a
// move publishes at once. The responder gets every change at once.
func TestPublishThrottle(t *testing.T) {
	a, c, mem, resp, owner := fixture(t)
	clk := clocktesting.NewFakeClock(time.Unix(1000, 0))
	a.deps.Clock = clk
	ctx := context.Background()
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	published := a.loop.prev
	// A Service this node will own.
	var vip string
	for i := range 50 {
		if v := fmt.Sprintf("10.213.3.%d", i); announce.Rank([]string{"node-1", "node-2", "node-3"}, ip(v))[0] == owner {
			vip = v
			break
		}
	}
	svc := agenttest.LBService("default", "late", vip)
	if err := c.Create(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	a.dirty.service(types.NamespacedName{Namespace: "default", Name: "late"})
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(resp.Table()[2], ip(vip)) {
		t.Fatalf("responder table %v lacks %s", resp.Table(), vip)
	}
	if _, ok := a.loop.prev.OwnerOf(ip(vip)); ok || !reflect.DeepEqual(a.loop.prev, published) {
		t.Fatal("published before publishEvery passed")
	}
	clk.Step(publishEvery)
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := a.loop.prev.OwnerOf(ip(vip)); n != owner {
		t.Fatalf("not published after publishEvery: owner %q", n)
	}
	// A member leaves: published at once.
	var other string
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if n != owner {
			other = n
		}
	}
	mem.Set(owner, other)
	if err := a.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if got := a.loop.prev.Owners[0].Eligible; got != 2 {
		t.Fatalf("a member change was not published at once: eligible %d", got)
	}
}
