package podipamctl_test

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// TestKilledNodeKeepsItsBlocksUntilItsNodeGoes: a node whose agent died
// (nothing writes its demand or releases any more, its Node is NotReady)
// keeps every block — through many reconciles, a pool change and a
// controller restart, while another node asks for the very pool it holds
// and gets only what is free — and its blocks go, to that other node,
// when its Node object is deleted.
func TestKilledNodeKeepsItsBlocksUntilItsNodeGoes(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, nil, 0)
	mkPool(t, c, "blue", []string{"10.245.0.0/25"}, 26, nil, 0) // two blocks in all
	blue := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blue", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "blue"}}}
	if err := c.Create(ctx, blue); err != nil {
		t.Fatal(err)
	}
	mkBareNode(t, c, "node-1")
	cfg := podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8}
	stopCtrl := startPodIPAM(t, e, cfg)

	// node-1's agent, with a grace far shorter than the dead period below:
	// a live agent would have given the blue block back many times over.
	dir := t.TempDir()
	ncfg := podipamctl.NodeConfig{REST: e.Config, NodeName: "node-1", Namespace: ns,
		StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "ipamd.sock"),
		PreAllocate: 8, Grace: 200 * time.Millisecond, Interval: 100 * time.Millisecond}
	actx, kill := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- podipamctl.RunNode(actx, ncfg) }()
	add(t, c, ipamd.NewClient(ncfg.Socket), "b1", "blue", "b1")
	held := blocks(t, c, "node-1", "")
	n1blue := blocks(t, c, "node-1", "blue")
	if len(n1blue) != 1 {
		t.Fatalf("node-1 holds blue blocks %v with one blue pod, want one", n1blue)
	}
	// The agent dies with its pod's address allocated; its Node goes
	// NotReady, as kube-controller-manager marks a silent node.
	kill()
	if err := <-done; err != nil {
		t.Fatalf("RunNode: %v", err)
	}
	var n1 corev1.Node
	if err := c.Get(ctx, client.ObjectKey{Name: "node-1"}, &n1); err != nil {
		t.Fatal(err)
	}
	n1.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionUnknown, Reason: "NodeStatusUnknown",
		Message: "Kubelet stopped posting node status.", LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
	if err := c.Status().Update(ctx, &n1); err != nil {
		t.Fatal(err)
	}

	// node-2 wants more of blue than there is: it gets the free block
	// and an Exhausted condition, never node-1's block.
	mkNode(t, c, "node-2")
	setRequests(t, c, "node-2", nil, mooringv1.PodIPAMRequest{Pool: "blue", IPv4Addresses: 200})
	exhausted := func() error {
		r := record(t, c, "node-2")
		if b := blocks(t, c, "node-2", "blue"); len(b) != 1 {
			return fmt.Errorf("node-2 holds blue blocks %v, want the one free", b)
		}
		if !meta.IsStatusConditionTrue(r.Status.Conditions, mooringv1.ConditionExhausted) {
			return fmt.Errorf("node-2 conditions %+v, want Exhausted", r.Status.Conditions)
		}
		return nil
	}
	eventually(t, 30*time.Second, "node-2 gets the free blue block and Exhausted", exhausted)

	// The dead period: both nodes are reconciled again and again (Node
	// changes, a pool change, a controller restart that imports the
	// records); node-1 keeps its blocks and node-2 gets none of them.
	kept := func(when string) {
		t.Helper()
		if got := blocks(t, c, "node-1", ""); !slices.Equal(got, held) {
			t.Fatalf("%s: node-1's blocks %v, held %v before its agent died", when, got, held)
		}
		if err := exhausted(); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	touch := func(obj client.Object, i int) {
		t.Helper()
		patch := fmt.Sprintf(`{"metadata":{"labels":{"test.mooring.dev/touch":"%d"}}}`, i)
		if err := c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		for _, n := range []string{"node-1", "node-2"} {
			touch(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, i)
		}
		time.Sleep(100 * time.Millisecond)
	}
	touch(&mooringv1.PodIPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"}}, 0)
	time.Sleep(time.Second)
	kept("after 10 Node changes and a pool change")
	stopCtrl()
	startPodIPAM(t, e, cfg)
	for i := range 10 {
		for _, n := range []string{"node-1", "node-2"} {
			touch(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, 10+i)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)
	kept("after a controller restart")

	// The Node object goes while its pod b1 still exists: the blocks stay
	// (issue 19 item 8), and the record says so. Once b1 is gone, its
	// record goes and its blue block is free, so node-2 gets it.
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
		t.Fatal(err)
	}
	retained(t, c, "node-1", "blue/b1")
	kept("after its Node was deleted, while its pod still exists")
	// Forced, as nothing runs a kubelet here to finish a graceful delete (a
	// terminating pod still counts: its containers may still run).
	if err := c.Delete(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "blue", Name: "b1"}}, client.GracePeriodSeconds(0)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "node-1's record deleted with its Node", func() error {
		if r := record(t, c, "node-1"); r.Name != "" {
			return fmt.Errorf("record still there: %v", r.Status.Blocks)
		}
		return nil
	})
	eventually(t, 30*time.Second, "node-2 gets node-1's blue block", func() error {
		got := blocks(t, c, "node-2", "blue")
		if len(got) != 2 || !slices.Contains(got, n1blue[0]) {
			return fmt.Errorf("node-2 holds blue %v, want also node-1's %v", got, n1blue)
		}
		return nil
	})
}
