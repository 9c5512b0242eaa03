package store

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/testenv"
)

// decisionOf reads one Service as syncService does and converts it.
func decisionOf(t *testing.T, r client.Reader, k types.NamespacedName) string {
	t.Helper()
	ctx := context.Background()
	var svc corev1.Service
	if err := r.Get(ctx, k, &svc); err != nil {
		return err.Error()
	}
	var es discoveryv1.EndpointSliceList
	if err := r.List(ctx, &es, client.InNamespace(k.Namespace), client.MatchingFields{IndexSliceService: k.Name}, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(convert.Service(&svc, convert.ReadyNodes(es.Items)[convert.Key(&svc)]))
}

func fullObjectsDecide(svc *corev1.Service, es []*discoveryv1.EndpointSlice) string {
	var items []discoveryv1.EndpointSlice
	for _, e := range es {
		items = append(items, *e)
	}
	return fmt.Sprint(convert.Service(svc, convert.ReadyNodes(items)[convert.Key(svc)]))
}

// The compact store answers the agent's reads with what the full objects
// convert to, whether it was filled by watch events or by a list.
func TestCompactStoreDecidesLikeFullObjects(t *testing.T) {
	for _, how := range []string{"events", "list"} {
		t.Run(how, func(t *testing.T) {
			s := newStore(func(types.NamespacedName) {}, func() {})
			r := Reader{store: s}
			var svcs corev1.ServiceList
			var es discoveryv1.EndpointSliceList
			for i := range 70 {
				svcs.Items = append(svcs.Items, *agenttest.VariedService(i))
				for _, e := range agenttest.VariedSlices(i) {
					es.Items = append(es.Items, *e)
				}
			}
			switch how {
			case "events":
				for i := range svcs.Items {
					if err := (serviceSink{s}).Add(svcs.DeepCopy().Items[i].DeepCopy()); err != nil {
						t.Fatal(err)
					}
				}
				for i := range es.Items {
					if err := (sliceSink{s}).Add(es.Items[i].DeepCopy()); err != nil {
						t.Fatal(err)
					}
				}
			case "list":
				var sl, el compactList
				compactServicePage(svcs.DeepCopy(), &sl)
				compactSlicePage(es.DeepCopy(), &el)
				if err := (serviceSink{s}).Replace(anys(sl.Items), "1"); err != nil {
					t.Fatal(err)
				}
				if err := (sliceSink{s}).Replace(anys(el.Items), "1"); err != nil {
					t.Fatal(err)
				}
			}
			if !s.synced() && how == "list" {
				t.Fatal("not synced after both lists")
			}
			for i := range 70 {
				full := agenttest.VariedService(i)
				want := fullObjectsDecide(full, agenttest.VariedSlices(i))
				k := types.NamespacedName{Namespace: full.Namespace, Name: full.Name}
				if got := decisionOf(t, r, k); got != want {
					t.Fatalf("Service %d: compact store decides\n%s\nfull objects\n%s", i, got, want)
				}
				// What syncService reads, with no object built.
				if got, ok := s.Service(k); !ok || fmt.Sprint(got) != want {
					t.Fatalf("Service %d: the compact form converts to\n%v\nfull objects\n%s", i, got, want)
				}
			}
			if got := s.Services(); len(got) != 70 {
				t.Fatalf("Services: %d Services, want 70", len(got))
			}
			if _, ok := s.Service(types.NamespacedName{Namespace: "bulk", Name: "nope"}); ok {
				t.Fatal("Service of a missing Service")
			}
			var all corev1.ServiceList
			if err := r.List(context.Background(), &all, client.UnsafeDisableDeepCopy); err != nil || len(all.Items) != 70 {
				t.Fatalf("listing every Service: %d, %v", len(all.Items), err)
			}
			var svc corev1.Service
			if err := r.Get(context.Background(), types.NamespacedName{Namespace: "bulk", Name: "nope"}, &svc); !apierrors.IsNotFound(err) {
				t.Fatalf("a missing Service: %v, want NotFound", err)
			}
		})
	}
}

func anys(objs []runtime.Object) []any {
	out := make([]any, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

// notes records the Services the store reports as changed.
type notes struct {
	mu   sync.Mutex
	keys []string
	all  int
}

func (n *notes) changed(k types.NamespacedName) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.keys = append(n.keys, k.Name)
}

func (n *notes) take() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := n.keys
	n.keys = nil
	slices.Sort(out)
	return out
}

// Only what the decision reads wakes it: status and metadata churn of a
// Service, or endpoint churn that keeps the same ready nodes, do not.
func TestCompactStoreWakesOnlyOnDecisionChanges(t *testing.T) {
	n := &notes{}
	s := newStore(n.changed, func() { n.all++ })
	svcs, slis := serviceSink{s}, sliceSink{s}
	step := func(name string, fn func() error, want ...string) {
		t.Helper()
		if err := fn(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := n.take(); !slices.Equal(got, want) {
			t.Fatalf("%s: woke %v, want %v", name, got, want)
		}
	}
	svc := agenttest.RealisticService(1)
	step("first list", func() error { return svcs.Replace([]any{svc.DeepCopy()}, "1") })
	if n.all != 1 {
		t.Fatalf("the first list marked everything %d times, want 1", n.all)
	}
	step("nothing the decision reads", func() error {
		u := svc.DeepCopy()
		u.ResourceVersion, u.Annotations, u.Spec.Ports = "2", map[string]string{"x": "y"}, nil
		u.Status.Conditions = nil
		return svcs.Update(u)
	})
	step("a new address", func() error {
		u := svc.DeepCopy()
		u.Status.LoadBalancer.Ingress = append(u.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "10.9.9.9"})
		return svcs.Update(u)
	}, "svc-00001")
	step("a label", func() error {
		u := svc.DeepCopy()
		u.Labels["tier"] = "gold"
		return svcs.Update(u)
	}, "svc-00001")
	es := agenttest.RealisticSlice(1)
	step("a slice", func() error { return slis.Add(es.DeepCopy()) }, "svc-00001")
	step("endpoint churn, same ready nodes", func() error {
		u := es.DeepCopy()
		u.ResourceVersion = "7"
		u.Endpoints[0].Addresses = []string{"10.244.9.9"}
		return slis.Update(u)
	})
	step("an endpoint no longer ready", func() error {
		u := es.DeepCopy()
		u.Endpoints[0].Conditions.Ready = ptr.To(false)
		return slis.Update(u)
	}, "svc-00001")
	step("the slice moves to another Service", func() error {
		u := es.DeepCopy()
		u.Labels[discoveryv1.LabelServiceName] = "svc-00002"
		return slis.Update(u)
	}, "svc-00001", "svc-00002")
	step("the slice deleted (tombstone)", func() error {
		return slis.Delete(toolscache.DeletedFinalStateUnknown{Key: "bulk/" + es.Name, Obj: es.DeepCopy()})
	}, "svc-00002")
	other := agenttest.RealisticService(3)
	step("a relist: one gone, one new", func() error { return svcs.Replace([]any{other.DeepCopy()}, "9") }, "svc-00001", "svc-00003")
	step("a delete", func() error { return svcs.Delete(other.DeepCopy()) }, "svc-00003")
	step("a delete of what is gone", func() error { return svcs.Delete(other.DeepCopy()) })
	if len(s.bySvc) != 0 || len(s.slices) != 0 || len(s.services) != 0 {
		t.Fatalf("left behind: %v %v %v", s.bySvc, s.slices, s.services)
	}
}

// Unsupported reads fail loudly instead of answering wrong.
func TestCompactReaderRefusesWhatItCannotAnswer(t *testing.T) {
	r := Reader{store: newStore(func(types.NamespacedName) {}, func() {})}
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"label selector", r.List(ctx, &corev1.ServiceList{}, client.MatchingLabels{"a": "b"})},
		{"other field", r.List(ctx, &discoveryv1.EndpointSliceList{}, client.InNamespace("x"), client.MatchingFields{"spec.x": "y"})},
		{"slice index without namespace", r.List(ctx, &discoveryv1.EndpointSliceList{}, client.MatchingFields{IndexSliceService: "y"})},
		{"one slice", r.Get(ctx, types.NamespacedName{Namespace: "x", Name: "y"}, &discoveryv1.EndpointSlice{})},
	} {
		if tc.err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

// Against a real API server: the paged list fills the store in pages
// (protobuf), the watch follows creates, updates and deletes, and the
// store matches the API.
func TestCompactCacheAgainstAPIServer(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cs := env.Clientset
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bulk"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	create := func(i int) {
		t.Helper()
		svc := apiService(i)
		svc.ResourceVersion, svc.UID, svc.ManagedFields, svc.Spec.ClusterIP, svc.Spec.ClusterIPs = "", "", nil, "", nil
		svc.Spec.Ports[0].NodePort = 0
		status := svc.Status
		created, err := cs.CoreV1().Services("bulk").Create(ctx, svc, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = status
		if _, err := cs.CoreV1().Services("bulk").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		for _, es := range agenttest.VariedSlices(i) {
			es.ResourceVersion, es.UID, es.ManagedFields, es.OwnerReferences = "", "", nil, nil
			if _, err := cs.DiscoveryV1().EndpointSlices("bulk").Create(ctx, es, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := range 23 {
		create(i)
	}
	n := &notes{}
	c, err := NewCache(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range c.lists {
		l.pageSize = 4 // several pages
	}
	c.store.changed, c.store.all = n.changed, func() { n.all++ }
	done := make(chan error)
	go func() { done <- c.Run(ctx) }()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("never synced")
	}
	r := Reader{store: c.store}
	check := func(i int) {
		t.Helper()
		full := apiService(i)
		want := fullObjectsDecide(full, agenttest.VariedSlices(i))
		deadline := time.Now().Add(10 * time.Second)
		for {
			got := decisionOf(t, r, types.NamespacedName{Namespace: "bulk", Name: full.Name})
			if got == want {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("Service %d: store decides\n%s\nAPI objects\n%s", i, got, want)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	for i := range 23 {
		check(i)
	}
	for _, l := range c.lists {
		if l.pages.Load() < 6 {
			t.Errorf("%s listed in %d pages of 4, want at least 6", l.resource, l.pages.Load())
		}
	}
	create(23) // through the watch
	check(23)
	if err := cs.CoreV1().Services("bulk").Delete(ctx, "svc-00004", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !slices.Contains(n.take(), "svc-00004") {
		if time.Now().After(deadline) {
			t.Fatal("the delete did not wake the decision")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var svc corev1.Service
	if err := r.Get(ctx, types.NamespacedName{Namespace: "bulk", Name: "svc-00004"}, &svc); !apierrors.IsNotFound(err) {
		t.Fatalf("deleted Service: %v", err)
	}
	cancel()
	<-done
}

// apiService is agenttest.VariedService(i) as the API server accepts it.
func apiService(i int) *corev1.Service {
	svc := agenttest.VariedService(i)
	svc.Spec.ExternalIPs = slices.DeleteFunc(svc.Spec.ExternalIPs, func(s string) bool { return s == "not-an-ip" })
	if svc.Spec.Type != corev1.ServiceTypeLoadBalancer {
		svc.Spec.AllocateLoadBalancerNodePorts, svc.Spec.ExternalTrafficPolicy = nil, ""
		svc.Spec.Ports[0].NodePort = 0
		svc.Status.LoadBalancer.Ingress = nil
	}
	return svc
}

// The core matches the API's virtual Service labels under the same keys.
func TestVirtualServiceLabelsMatchTheAPI(t *testing.T) {
	if announce.LabelServiceNamespace != mooringv1.LabelServiceNamespace || announce.LabelServiceName != mooringv1.LabelServiceName {
		t.Fatalf("announce %q %q, API %q %q", announce.LabelServiceNamespace, announce.LabelServiceName,
			mooringv1.LabelServiceNamespace, mooringv1.LabelServiceName)
	}
}
