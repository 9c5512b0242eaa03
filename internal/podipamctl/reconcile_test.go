package podipamctl_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// TestNodeSideReconcilesLeakedAddresses: on a real apiserver, the agent
// frees the allocation of a pod deleted from the API without a DEL (its
// sandbox forgotten by the runtime) and the one a StatefulSet pod's
// predecessor of the same name left behind, and keeps, through many more
// passes, a live pod's, the recreated pod's own (same name, new UID), one
// without a pod name (an older
// plugin) and a static pod's whose mirror pod is not in the API. It writes
// nothing to the API for it and counts the freed addresses.
func TestNodeSideReconcilesLeakedAddresses(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeClusterPool, "test"); err != nil {
		t.Fatal(err)
	}
	mkBareNode(t, c, "node-1")
	startPodIPAM(t, e, clusterPoolConfig())
	const interval = time.Second
	reg := prometheus.NewRegistry()
	var state string
	cl := startNode(t, e, "node-1", time.Minute, func(nc *podipamctl.NodeConfig) {
		nc.ReconcileInterval, nc.ReconcileMinAge, nc.Metrics = interval, interval, podipamctl.NewNodeMetrics(reg)
		state = nc.StateDir
	})
	addPod := func(id, pod string) {
		t.Helper()
		mkPod(t, c, "d", pod)
		var p corev1.Pod
		if err := c.Get(ctx, client.ObjectKey{Namespace: "d", Name: pod}, &p); err != nil {
			t.Fatal(err)
		}
		addAs(t, cl, ipamd.AddRequest{Key: ipamd.Key{Network: "pods", ContainerID: id, IfName: "eth0"}, Namespace: "d", Pod: pod, PodUID: string(p.UID)})
	}
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "d"}}); err != nil {
		t.Fatal(err)
	}
	addPod("c-gone", "gone")
	addPod("c-live", "live")
	addPod("c-db-old", "db-0")
	// The runtime forgot these sandboxes: their pods go without a DEL.
	deletePod(t, c, "d", "gone")
	deletePod(t, c, "d", "db-0")
	addPod("c-db-new", "db-0") // recreated under its name: a new UID
	// A plugin from before pod names, and a static pod of node-1 whose
	// mirror pod the API does not hold (the API was down, or it was
	// deleted): neither can be judged from the API.
	addAs(t, cl, ipamd.AddRequest{Key: ipamd.Key{Network: "pods", ContainerID: "c-bare", IfName: "eth0"}})
	addAs(t, cl, ipamd.AddRequest{Key: ipamd.Key{Network: "pods", ContainerID: "c-static", IfName: "eth0"},
		Namespace: "kube-system", Pod: "probe-node-1", PodUID: "0123456789abcdef"})
	before, err := mutations(ctx, c)
	if err != nil {
		t.Fatal(err)
	}

	keep := []string{"c-bare", "c-db-new", "c-live", "c-static"}
	start := time.Now()
	eventually(t, 30*time.Second, "the leaked allocations freed", func() error {
		got := stored(t, state)
		if slices.Contains(got, "c-gone") || slices.Contains(got, "c-db-old") {
			return fmt.Errorf("store holds %v", got)
		}
		return nil
	})
	t.Logf("leaked allocations freed %v after the pods left (interval and minimum age %v)", time.Since(start).Round(100*time.Millisecond), interval)
	if got := stored(t, state); !slices.Equal(got, keep) {
		t.Fatalf("store holds %v after the leaks were freed, want %v", got, keep)
	}
	// Five more passes keep what is not leaked.
	time.Sleep(5 * interval)
	if got := stored(t, state); !slices.Equal(got, keep) {
		t.Fatalf("store holds %v five passes later, want %v", got, keep)
	}
	if n := counterValue(t, reg, "mooring_agent_pod_ipam_reconciled_addresses_total"); n != 4 {
		t.Fatalf("reconciled addresses counted %v, want 4 (two dual-stack allocations)", n)
	}
	after, err := mutations(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	if before != after {
		t.Fatalf("the agent wrote to the API while reconciling: pods and events %q before, %q after", before, after)
	}
}

// addAs retries an ADD while the node has no block yet, as a kubelet does.
func addAs(t *testing.T, cl *ipamd.Client, req ipamd.AddRequest) {
	t.Helper()
	eventually(t, 30*time.Second, "ADD "+req.ContainerID, func() error {
		_, err := cl.Add(context.Background(), req)
		var ce *ipamd.CallError
		if errors.As(err, &ce) && ce.Kind != ipamd.KindNoBlock && ce.Kind != ipamd.KindUnavailable {
			t.Fatalf("ADD %s: %v", req.ContainerID, err)
		}
		return err
	})
}

// deletePod removes a pod at once (no kubelet confirms its end here).
func deletePod(t *testing.T, c client.Client, namespace, name string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}}
	if err := c.Delete(context.Background(), p, &client.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "pod "+name+" gone", func() error {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(p), &corev1.Pod{}); !apierrors.IsNotFound(err) {
			return fmt.Errorf("get: %v", err)
		}
		return nil
	})
}

// stored returns the container IDs of the node's stored allocations,
// sorted.
func stored(t *testing.T, dir string) []string {
	t.Helper()
	all, err := ipamd.ReadStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, al := range all {
		ids = append(ids, al.ContainerID)
	}
	slices.Sort(ids)
	return ids
}

// mutations names the pods and Events in the API with their resource
// versions: a write to any of them changes it.
func mutations(ctx context.Context, c client.Client) (string, error) {
	var pods corev1.PodList
	if err := c.List(ctx, &pods); err != nil {
		return "", err
	}
	var events corev1.EventList
	if err := c.List(ctx, &events); err != nil {
		return "", err
	}
	var b strings.Builder
	for _, p := range pods.Items {
		fmt.Fprintf(&b, "pod %s/%s@%s ", p.Namespace, p.Name, p.ResourceVersion)
	}
	fmt.Fprintf(&b, "events %d", len(events.Items))
	return b.String(), nil
}

// counterValue reads a counter without labels from reg.
func counterValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}
