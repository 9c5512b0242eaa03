package podipamctl_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// retained waits for the record's NodeDeleted condition (BlocksRetained)
// naming pod.
func retained(t *testing.T, c client.Client, node, pod string) {
	t.Helper()
	eventually(t, 30*time.Second, node+" says its blocks are retained", func() error {
		cond := meta.FindStatusCondition(record(t, c, node).Status.Conditions, mooringv1.ConditionNodeDeleted)
		if cond == nil || cond.Status != metav1.ConditionTrue || cond.Reason != "BlocksRetained" || !strings.Contains(cond.Message, pod) {
			return fmt.Errorf("NodeDeleted = %+v, want True/BlocksRetained naming %s", cond, pod)
		}
		return nil
	})
}

// runningPod marks a pod Running with ip, as its kubelet would.
func runningPod(t *testing.T, c client.Client, namespace, name string, ip netip.Addr) {
	t.Helper()
	var p corev1.Pod
	if err := c.Get(context.Background(), client.ObjectKey{Namespace: namespace, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	p.Status.Phase = corev1.PodRunning
	p.Status.PodIP, p.Status.PodIPs = ip.String(), []corev1.PodIP{{IP: ip.String()}}
	if err := c.Status().Update(context.Background(), &p); err != nil {
		t.Fatal(err)
	}
}

// Issue 19 item 8: `kubectl delete node` while the node's pods still run,
// and the Node re-created (the kubelet registers again): no block of it is
// cut for another node until those pods are gone — or until the grace the
// operator set. The record says why its blocks stay. A record an older
// agent made owned by its Node (so the garbage collector would delete it
// with the Node) loses that owner reference.
func TestDeletedNodeKeepsItsBlocksWhileItsPodsRun(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, nil, 0)
	mkPool(t, c, "blue", []string{"10.245.0.0/25"}, 26, nil, 0) // two blocks in all
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "blue",
		Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "blue"}}}); err != nil {
		t.Fatal(err)
	}
	n1 := mkBareNode(t, c, "node-1")
	cfg := podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8}
	stopCtrl := startPodIPAM(t, e, cfg)
	cl := startNode(t, e, "node-1", time.Minute)
	al := add(t, c, cl, "b1", "blue", "b1")
	runningPod(t, c, "blue", "b1", al.IPs[0].Address.Addr())
	n1blue := blocks(t, c, "node-1", "blue")
	held := blocks(t, c, "node-1", "")
	olderAgentsRecord(t, c, n1)

	mkNode(t, c, "node-2")
	setRequests(t, c, "node-2", nil, mooringv1.PodIPAMRequest{Pool: "blue", IPv4Addresses: 200})
	node2Limited := func(when string) {
		t.Helper()
		eventually(t, 30*time.Second, when+": node-2 holds only the free blue block", func() error {
			if b := blocks(t, c, "node-2", "blue"); len(b) != 1 || slices.Contains(b, n1blue[0]) {
				return fmt.Errorf("node-2 blue %v, node-1's %v", b, n1blue)
			}
			return nil
		})
	}
	node1Keeps := func(when string) {
		t.Helper()
		if got := blocks(t, c, "node-1", ""); !slices.Equal(got, held) {
			t.Fatalf("%s: node-1's blocks %v, held %v", when, got, held)
		}
	}
	node2Limited("before")

	// The Node is deleted while b1 runs: its blocks stay.
	deleteNode := func() {
		t.Helper()
		if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}); err != nil {
			t.Fatal(err)
		}
	}
	deleteNode()
	retained(t, c, "node-1", "blue/b1")
	time.Sleep(time.Second) // reconciles of node-2 and node-1 in between
	node1Keeps("Node deleted")
	node2Limited("Node deleted")

	// The kubelet registers the Node again: it keeps its blocks, the
	// condition clears, and its agent still serves a new pod from them.
	mkBareNode(t, c, "node-1")
	eventually(t, 30*time.Second, "NodeDeleted cleared", func() error {
		if cond := meta.FindStatusCondition(record(t, c, "node-1").Status.Conditions, mooringv1.ConditionNodeDeleted); cond == nil || cond.Status != metav1.ConditionFalse {
			return fmt.Errorf("NodeDeleted = %+v", cond)
		}
		return nil
	})
	node1Keeps("Node re-created")
	node2Limited("Node re-created")
	if b2 := add(t, c, cl, "b2", "blue", "b2"); !n1blue[0].Contains(b2.IPs[0].Address.Addr()) {
		t.Fatalf("a new pod on the re-created node got %v, outside its block %v", b2.IPs, n1blue)
	}

	// With a grace set, the blocks go once it passed, pods or not.
	stopCtrl()
	cfg.DeletedNodeGrace = 3 * time.Second
	startPodIPAM(t, e, cfg)
	deleteNode()
	graceReleases(t, c, n1blue[0])
}

// graceReleases: node-1, deleted with two pods still on it, keeps its
// blocks only until the grace passed; then node-2 gets its blue block.
func graceReleases(t *testing.T, c client.Client, n1blue netip.Prefix) {
	t.Helper()
	retained(t, c, "node-1", "2 pods, e.g. blue/b1")
	if msg := meta.FindStatusCondition(record(t, c, "node-1").Status.Conditions, mooringv1.ConditionNodeDeleted).Message; !strings.Contains(msg, "--pod-ipam-deleted-node-grace") {
		t.Fatalf("message %q does not name the grace", msg)
	}
	eventually(t, 30*time.Second, "node-1's record deleted after the grace", func() error {
		if r := record(t, c, "node-1"); r.Name != "" {
			return fmt.Errorf("record still there: %v", r.Status.Blocks)
		}
		return nil
	})
	eventually(t, 30*time.Second, "node-2 gets node-1's blue block", func() error {
		if got := blocks(t, c, "node-2", "blue"); len(got) != 2 || !slices.Contains(got, n1blue) {
			return fmt.Errorf("node-2 blue %v", got)
		}
		return nil
	})
}

// olderAgentsRecord makes node's record owned by its Node, as agents before
// this version made it, and waits for the controller to drop that.
func olderAgentsRecord(t *testing.T, c client.Client, n *corev1.Node) {
	t.Helper()
	// The controller and the agent write the record too: retry on conflict.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		rec := record(t, c, n.Name)
		rec.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: n.Name, UID: n.UID}}
		return c.Update(context.Background(), rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the Node owner reference dropped", func() error {
		if o := record(t, c, n.Name).OwnerReferences; len(o) > 0 {
			return fmt.Errorf("owners %v", o)
		}
		return nil
	})
}
