package podipamctl

import (
	"context"
	"log/slog"
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipam"
)

// TestLaggingNodeCacheKeepsTheRecord: a record reconciled before its Node
// reached the controller's cache (the agent creates it right after the
// Node; CI saw a new node's record deleted this way, and the node got no
// block) stays; a Node the API server does not have either is gone, and
// its record goes.
func TestLaggingNodeCacheKeepsTheRecord(t *testing.T) {
	for _, tc := range []struct {
		name       string
		apiHasNode bool
		wantRecord bool
	}{
		{"node only in the API server", true, true},
		{"node gone everywhere", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: "node-5"}}
			node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-5"}}
			byName := func(o client.Object) []string { return []string{o.GetName()} }
			// The cache: the record, not (yet) the Node.
			cache := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(rec.DeepCopy()).
				WithStatusSubresource(&mooringv1.PodIPAMNode{}).Build()
			objs := []client.Object{rec.DeepCopy()}
			if tc.apiHasNode {
				objs = append(objs, node)
			}
			api := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithObjects(objs...).
				WithIndex(&corev1.Node{}, "metadata.name", byName).Build()
			cfg := clusterPoolTestConfig()
			st := &state{cfg: cfg, alloc: podipam.NewAllocator(), exhausted: map[string]string{}, written: map[string]string{}, seen: map[types.UID]int64{}}
			st.alloc.SetPools([]podipam.Pool{cfg.clusterPool()})
			r := &nodeReconciler{c: cache, api: api, st: st, rec: events.NewFakeRecorder(10), log: slog.New(slog.DiscardHandler)}
			if _, err := r.Reconcile(context.Background(), reconcile.Request{NamespacedName: client.ObjectKey{Name: "node-5"}}); err != nil {
				t.Fatal(err)
			}
			err := cache.Get(context.Background(), client.ObjectKey{Name: "node-5"}, &mooringv1.PodIPAMNode{})
			if got := err == nil; got != tc.wantRecord {
				t.Fatalf("record kept = %v (err %v), want %v", got, err, tc.wantRecord)
			}
			if err != nil && !apierrors.IsNotFound(err) {
				t.Fatal(err)
			}
		})
	}
}

func clusterPoolTestConfig() Config {
	return Config{Mode: ModeClusterPool,
		ClusterPoolV4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, MaskV4: 24}
}
