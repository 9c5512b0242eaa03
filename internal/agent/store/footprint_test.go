package store

import (
	"fmt"
	"runtime"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/convert"
)

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkCacheFootprint reports the heap the informer stores hold for
// 10,000 Services and their EndpointSlices, with the previous transform
// (managedFields stripped) and with the slim Transforms, and the heap the
// agent's compact store (mem_store.go) holds for the same objects.
func BenchmarkCacheFootprint(b *testing.B) {
	const n = 10000
	for _, tc := range []struct {
		name       string
		svc, slice toolscache.TransformFunc
	}{
		{"strip-managed-fields", cache.TransformStripManagedFields(), cache.TransformStripManagedFields()},
		{"agent-Transforms", slimService, slimSlice},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				before := heapInUse()
				svcs := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
				slices := toolscache.NewIndexer(toolscache.MetaNamespaceKeyFunc, toolscache.Indexers{})
				for i := range n {
					s, err := tc.svc(agenttest.RealisticService(i))
					if err != nil {
						b.Fatal(err)
					}
					e, err := tc.slice(agenttest.RealisticSlice(i))
					if err != nil {
						b.Fatal(err)
					}
					if err := svcs.Add(s); err != nil {
						b.Fatal(err)
					}
					if err := slices.Add(e); err != nil {
						b.Fatal(err)
					}
				}
				after := heapInUse()
				b.ReportMetric(float64(after-before)/(1<<20), "MiB")
				runtime.KeepAlive(svcs)
				runtime.KeepAlive(slices)
			}
		})
	}
	b.Run("compact-store", func(b *testing.B) {
		for b.Loop() {
			before := heapInUse()
			s := newStore(func(types.NamespacedName) {}, func() {})
			for i := range n {
				if err := (serviceSink{s}).Add(agenttest.RealisticService(i)); err != nil {
					b.Fatal(err)
				}
				if err := (sliceSink{s}).Add(agenttest.RealisticSlice(i)); err != nil {
					b.Fatal(err)
				}
			}
			after := heapInUse()
			b.ReportMetric(float64(after-before)/(1<<20), "MiB")
			runtime.KeepAlive(s)
		}
	})
}

// The Transforms keep every field the decision reads: converting a slim
// object gives what converting the full one gives.
func TestTransformsKeepWhatTheDecisionReads(t *testing.T) {
	for i := range 50 {
		svc := agenttest.RealisticService(i)
		svc.Spec.ExternalIPs = []string{"192.0.2.7"}
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		es := agenttest.RealisticSlice(i)
		slim, err := slimService(svc.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		slimES, err := slimSlice(es.DeepCopy())
		if err != nil {
			t.Fatal(err)
		}
		full := convert.Service(svc, convert.ReadyNodes([]discoveryv1.EndpointSlice{*es})[convert.Key(svc)])
		got := convert.Service(slim.(*corev1.Service), convert.ReadyNodes([]discoveryv1.EndpointSlice{*slimES.(*discoveryv1.EndpointSlice)})[convert.Key(svc)])
		if fmt.Sprint(full) != fmt.Sprint(got) {
			t.Fatalf("slim Service converts to\n%+v\nfull to\n%+v", got, full)
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}, {Type: corev1.NodeHostName, Address: "node-1"}},
			Images: []corev1.ContainerImage{{Names: []string{"registry.example/big:1"}, SizeBytes: 1 << 30}}}}
	slim, _ := slimNode(node.DeepCopy())
	sn := *slim.(*corev1.Node)
	if fmt.Sprint(convert.PeersOf([]corev1.Node{sn}, "x", 7946)) != fmt.Sprint(convert.PeersOf([]corev1.Node{*node}, "x", 7946)) ||
		fmt.Sprint(convert.Nodes([]corev1.Node{sn})) != fmt.Sprint(convert.Nodes([]corev1.Node{*node})) || len(sn.Status.Images) != 0 {
		t.Fatalf("slim node %+v", sn)
	}
}
