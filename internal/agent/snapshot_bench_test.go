package agent

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/snapshot"
	"github.com/mooringlb/mooring/internal/agent/store"
	"github.com/mooringlb/mooring/internal/kube"
)

// snapshotBenchAgent is an agent reading n Services (and their slices)
// from a compact store, as in production, with --state-dir set; it has
// decided once.
func snapshotBenchAgent(tb testing.TB, n int) (*Agent, *store.Store) {
	tb.Helper()
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).
		WithObjects(agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"),
			&mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}).Build()
	cs := store.NewStore()
	for i := range n {
		if err := cs.Update(agenttest.VariedService(i)); err != nil {
			tb.Fatal(err)
		}
		for _, es := range agenttest.VariedSlices(i) {
			if err := cs.Update(es); err != nil {
				tb.Fatal(err)
			}
		}
	}
	cfg := DefaultConfig()
	cfg.NodeName, cfg.StateDir = "node-1", tb.TempDir()
	mem := agenttest.NewMembers([]string{"node-1", "node-2", "node-3"}...)
	a := New(cfg, Deps{Reader: snapshot.NewSwitchReader(store.NewReader(c, cs)), Client: c, Members: mem, Responder: &agenttest.Responder{},
		Links: agenttest.Links{}, Sysctls: agenttest.Sysctls{}, Registerer: prometheus.NewRegistry()})
	a.dirty.mark(func(c *changed) { c.all, c.nodes, c.policies, c.links = true, true, true, true })
	if err := a.decide(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return a, cs
}

// keeper is the snapshot writer of a.
func keeper(a *Agent) *snapshot.Keeper {
	return &snapshot.Keeper{Dir: a.cfg.StateDir, Node: a.cfg.NodeName, Reader: a.deps.Reader, Clock: a.deps.Clock, Log: a.log, Metrics: a.snapMet}
}

// BenchmarkSnapshot10k measures the snapshot loop's work at 10,000
// Services: "unchanged" is a decision after which nothing the snapshot
// holds changed (the common case: it must cost next to nothing),
// "status-only" an update of a field the decision does not read, "changed"
// one Service's address changed (encode and write).
func BenchmarkSnapshot10k(b *testing.B) {
	a, cs := snapshotBenchAgent(b, 10000)
	ctx := context.Background()
	res := a.loop.state.Result()
	var last snapshot.Mark
	k := keeper(a)
	if wrote, err := k.Save(ctx, res, &last); err != nil || !wrote {
		b.Fatalf("first save: wrote %v, %v", wrote, err)
	}
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if wrote, err := k.Save(ctx, res, &last); err != nil || wrote {
				b.Fatalf("wrote %v, %v", wrote, err)
			}
		}
	})
	b.Run("status-only", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			svc := agenttest.VariedService(0)
			svc.ResourceVersion = fmt.Sprint(500000 + i)
			svc.Status.Conditions = append(svc.Status.Conditions, metav1.Condition{Type: "x", Message: fmt.Sprint(i)})
			i++
			if err := cs.Update(svc); err != nil {
				b.Fatal(err)
			}
			if wrote, err := k.Save(ctx, res, &last); err != nil || wrote {
				b.Fatalf("wrote %v, %v", wrote, err)
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			svc := agenttest.VariedService(0)
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("10.250.%d.%d", i/250%250, i%250)}}
			i++
			if err := cs.Update(svc); err != nil {
				b.Fatal(err)
			}
			if wrote, err := k.Save(ctx, res, &last); err != nil || !wrote {
				b.Fatalf("wrote %v, %v", wrote, err)
			}
		}
	})
}

// hideStore reads through the compact store without the snapshot seeing
// it: the generic path, the oracle of the compact encoding.
type hideStore struct{ client.Reader }

// The snapshot encoded straight from the compact store decodes to the
// objects the generic path encodes (every field the decision reads
// varied), and is rewritten only when something the decision reads
// changed: not for resource versions, status-only updates or map order.
func TestSnapshotFromCompactStore(t *testing.T) {
	a, cs := snapshotBenchAgent(t, 60)
	ctx := context.Background()
	res := a.loop.state.Result()
	fast, err := snapshot.Read(ctx, a.deps.Reader, "node-1", res)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := snapshot.Read(ctx, hideStore{a.deps.Reader}, "node-1", res)
	if err != nil {
		t.Fatal(err)
	}
	if len(fast.Services) != 60 || len(fast.Slices) < 60 || len(fast.Owned) == 0 {
		t.Fatalf("snapshot holds %d Services, %d slices, %d owned", len(fast.Services), len(fast.Slices), len(fast.Owned))
	}
	if !reflect.DeepEqual(fast, slow) {
		for i := range fast.Services {
			if !reflect.DeepEqual(fast.Services[i], slow.Services[i]) {
				t.Errorf("Service %d:\ncompact %+v\ngeneric %+v", i, fast.Services[i], slow.Services[i])
				break
			}
		}
		t.Fatalf("the compact encoding differs from the generic one")
	}
	// It decides alike: the snapshot reader over it gives the same result.
	b := New(a.cfg, Deps{Reader: snapshot.NewReader(fast), Client: a.deps.Client, Members: a.deps.Members, Responder: &agenttest.Responder{},
		Links: agenttest.Links{}, Sysctls: agenttest.Sysctls{}, Registerer: prometheus.NewRegistry()})
	b.dirty.mark(func(c *changed) { c.all, c.nodes, c.policies, c.links = true, true, true, true })
	if err := b.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.loop.state.Result(); !reflect.DeepEqual(got, res) {
		t.Fatalf("decision from the snapshot\n%+v\nlive\n%+v", got, res)
	}

	var last snapshot.Mark
	k := keeper(a)
	save := func(what string, want bool) {
		t.Helper()
		if wrote, err := k.Save(ctx, res, &last); err != nil || wrote != want {
			t.Fatalf("%s: wrote %v (%v), want %v", what, wrote, err, want)
		}
	}
	save("first", true)
	save("nothing changed", false)
	svc := agenttest.VariedService(0)
	svc.ResourceVersion = "999999"
	svc.Status.Conditions = append(svc.Status.Conditions, metav1.Condition{Type: "x"})
	if err := cs.Update(svc); err != nil {
		t.Fatal(err)
	}
	save("status-only update", false)
	var n corev1.Node
	if err := a.deps.Client.Get(ctx, types.NamespacedName{Name: "node-2"}, &n); err != nil {
		t.Fatal(err)
	}
	rv := n.ResourceVersion
	if err := a.deps.Client.Update(ctx, &n); err != nil || n.ResourceVersion == rv {
		t.Fatalf("updating node-2: %v, resource version %s, was %s", err, n.ResourceVersion, rv)
	}
	save("a Node's resource version", false)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.250.0.1"}}
	if err := cs.Update(svc); err != nil {
		t.Fatal(err)
	}
	save("an address changed", true)
	got, err := snapshot.Load(a.cfg.StateDir, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Written.IsZero() || len(got.Services) != 60 || got.Services[0].Status.LoadBalancer.Ingress[0].IP != "10.250.0.1" {
		t.Fatalf("read back: written %v, %d Services, first %+v", got.Written, len(got.Services), got.Services[0].Status)
	}
}
