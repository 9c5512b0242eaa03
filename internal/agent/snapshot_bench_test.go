package agent

import (
	"context"
	"encoding/json"
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
	"github.com/mooringlb/mooring/internal/kube"
)

// snapshotBenchAgent is an agent reading n Services (and their slices)
// from a compact store, as in production, with --state-dir set; it has
// decided once.
func snapshotBenchAgent(tb testing.TB, n int) (*Agent, *compactStore) {
	tb.Helper()
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).
		WithObjects(testNode("node-1"), testNode("node-2"), testNode("node-3"),
			&mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}).Build()
	store := newCompactStore(func(types.NamespacedName) {}, func() {})
	for i := range n {
		if err := (serviceSink{store}).Update(variedService(i)); err != nil {
			tb.Fatal(err)
		}
		for _, es := range variedSlices(i) {
			if err := (sliceSink{store}).Update(es); err != nil {
				tb.Fatal(err)
			}
		}
	}
	store.svcSynced.Store(true)
	store.sliceSynced.Store(true)
	cfg := DefaultConfig()
	cfg.NodeName, cfg.StateDir = "node-1", tb.TempDir()
	mem := &fakeMembers{members: []string{"node-1", "node-2", "node-3"}, changes: make(chan struct{}, 1)}
	a := New(cfg, Deps{Reader: newSwitchReader(compactReader{c, store}), Client: c, Members: mem, Responder: &fakeResponder{},
		Links: fakeLinks{}, Sysctls: fakeSysctls{}, Registerer: prometheus.NewRegistry()})
	a.dirty.mark(func(c *changed) { c.all, c.nodes, c.policies, c.links = true, true, true, true })
	if err := a.decide(context.Background()); err != nil {
		tb.Fatal(err)
	}
	return a, store
}

// BenchmarkSnapshot10k measures the snapshot loop's work at 10,000
// Services: "unchanged" is a decision after which nothing the snapshot
// holds changed (the common case: it must cost next to nothing),
// "status-only" an update of a field the decision does not read, "changed"
// one Service's address changed (encode and write).
func BenchmarkSnapshot10k(b *testing.B) {
	a, store := snapshotBenchAgent(b, 10000)
	ctx := context.Background()
	res := a.state.Result()
	var last snapshotMark
	if wrote, err := a.saveSnapshot(ctx, res, &last); err != nil || !wrote {
		b.Fatalf("first save: wrote %v, %v", wrote, err)
	}
	b.Run("unchanged", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if wrote, err := a.saveSnapshot(ctx, res, &last); err != nil || wrote {
				b.Fatalf("wrote %v, %v", wrote, err)
			}
		}
	})
	b.Run("status-only", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			svc := variedService(0)
			svc.ResourceVersion = fmt.Sprint(500000 + i)
			svc.Status.Conditions = append(svc.Status.Conditions, metav1.Condition{Type: "x", Message: fmt.Sprint(i)})
			i++
			if err := (serviceSink{store}).Update(svc); err != nil {
				b.Fatal(err)
			}
			if wrote, err := a.saveSnapshot(ctx, res, &last); err != nil || wrote {
				b.Fatalf("wrote %v, %v", wrote, err)
			}
		}
	})
	b.Run("changed", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			svc := variedService(0)
			svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: fmt.Sprintf("10.250.%d.%d", i/250%250, i%250)}}
			i++
			if err := (serviceSink{store}).Update(svc); err != nil {
				b.Fatal(err)
			}
			if wrote, err := a.saveSnapshot(ctx, res, &last); err != nil || !wrote {
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
	a, store := snapshotBenchAgent(t, 60)
	ctx := context.Background()
	res := a.state.Result()
	fast, err := readSnapshot(ctx, a.deps.Reader, "node-1", res)
	if err != nil {
		t.Fatal(err)
	}
	slow, err := readSnapshot(ctx, hideStore{a.deps.Reader}, "node-1", res)
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
	b := New(a.cfg, Deps{Reader: newSnapshotReader(fast), Client: a.deps.Client, Members: a.deps.Members, Responder: &fakeResponder{},
		Links: fakeLinks{}, Sysctls: fakeSysctls{}, Registerer: prometheus.NewRegistry()})
	b.dirty.mark(func(c *changed) { c.all, c.nodes, c.policies, c.links = true, true, true, true })
	if err := b.decide(ctx); err != nil {
		t.Fatal(err)
	}
	if got := b.state.Result(); !reflect.DeepEqual(got, res) {
		t.Fatalf("decision from the snapshot\n%+v\nlive\n%+v", got, res)
	}

	var last snapshotMark
	save := func(what string, want bool) {
		t.Helper()
		if wrote, err := a.saveSnapshot(ctx, res, &last); err != nil || wrote != want {
			t.Fatalf("%s: wrote %v (%v), want %v", what, wrote, err, want)
		}
	}
	save("first", true)
	save("nothing changed", false)
	svc := variedService(0)
	svc.ResourceVersion = "999999"
	svc.Status.Conditions = append(svc.Status.Conditions, metav1.Condition{Type: "x"})
	if err := (serviceSink{store}).Update(svc); err != nil {
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
	if err := (serviceSink{store}).Update(svc); err != nil {
		t.Fatal(err)
	}
	save("an address changed", true)
	got, err := loadSnapshot(a.cfg.StateDir, "node-1")
	if err != nil {
		t.Fatal(err)
	}
	if got.Written.IsZero() || len(got.Services) != 60 || got.Services[0].Status.LoadBalancer.Ingress[0].IP != "10.250.0.1" {
		t.Fatalf("read back: written %v, %d Services, first %+v", got.Written, len(got.Services), got.Services[0].Status)
	}
}

func TestAppendJSONStringMatchesEncodingJSON(t *testing.T) {
	for _, s := range []string{"", "web", "a\"b", `back\slash`, "tab\t", "<&>", "é", "\x7f", "\xff", "mooring.dev/x_y-z.1"} {
		want, _ := json.Marshal(s)
		if got := appendJSONString(nil, s); string(got) != string(want) {
			t.Errorf("%q: %s, want %s", s, got, want)
		}
	}
}
