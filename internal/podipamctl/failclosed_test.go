package podipamctl_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

// Issue 19 item 5: when the pod's pool cannot be determined — here the API
// server answers Forbidden for a pod the agent's cache does not hold yet,
// and NotFound for a pod it does not know — the ADD fails with a retryable
// error and allocates nothing, never an address of the namespace's or the
// default pool (which is what it did before).
func TestPoolChoiceFailsClosed(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, nil, 0)
	mkPool(t, c, "tenant-a", []string{"10.250.0.0/16"}, 26, nil, 0)
	mkPool(t, c, "special", []string{"10.252.0.0/16"}, 26, nil, 0)
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a",
		Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "tenant-a"}}}); err != nil {
		t.Fatal(err)
	}
	mkBareNode(t, c, "node-1")
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})

	// An agent identity that may list and watch pods (its cache works) but
	// not get one: every direct read of a pod is an API error.
	limited := limitedAgent(t, e.Config)
	dir := t.TempDir()
	cfg := podipamctl.NodeConfig{REST: limited, NodeName: "node-1", Namespace: ns,
		StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "ipamd.sock"),
		PreAllocate: 8, Grace: time.Minute, Interval: 100 * time.Millisecond}
	nctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- podipamctl.RunNode(nctx, cfg) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunNode: %v", err)
		}
	}()
	cl := ipamd.NewClient(cfg.Socket)
	// A pod of this node, in the cache: served from its own pool.
	if al := add(t, c, cl, "mine", "tenant-a", "mine"); al.Pool != "tenant-a" {
		t.Fatalf("a cached pod: %+v", al)
	}
	// A pod annotated for pool "special" that the cache does not hold (bound
	// to another node, as a pod is for a moment while this agent's watch
	// catches up): the direct read is Forbidden.
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "special-1",
		Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "special"}},
		Spec: corev1.PodSpec{NodeName: "node-2", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	for _, pod := range []string{"special-1", "never-created"} {
		for range 3 { // and again: the answer does not change into another pool
			al, err := cl.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{Network: "pods", ContainerID: pod, IfName: "eth0"}, Namespace: "tenant-a", Pod: pod})
			var ce *ipamd.CallError
			if !errors.As(err, &ce) || ce.Kind != ipamd.KindUnavailable {
				t.Fatalf("ADD of %s whose pool cannot be read: %+v, %v; want a retryable %q error", pod, al, err, ipamd.KindUnavailable)
			}
		}
	}
	// A kubelet retrying: 20 more failed ADDs of one pod cost at most the
	// Event series' one create and one patch, not a write each.
	time.Sleep(time.Second) // the first Events of the loop above are written
	before, err := testenv.MutatingRequests(ctx, e.Clientset)
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		_, _ = cl.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{Network: "pods", ContainerID: "special-1", IfName: "eth0"}, Namespace: "tenant-a", Pod: "special-1"})
	}
	time.Sleep(time.Second)
	after, err := testenv.MutatingRequests(ctx, e.Clientset)
	if err != nil {
		t.Fatal(err)
	}
	if d := testenv.DiffRequests(before, after); d["POST events"]+d["PATCH events"] > 2 {
		t.Fatalf("20 failed ADDs of one pod wrote %v", d)
	}
	store, err := ipamd.ReadStore(cfg.StateDir)
	if err != nil || len(store) != 1 || store[0].Pod != "mine" {
		t.Fatalf("stored %+v, %v: only the cached pod may hold an address", store, err)
	}
}

// limitedAgent returns a config for a user holding what the node side
// needs, except get on pods.
func limitedAgent(t *testing.T, admin *rest.Config) *rest.Config {
	t.Helper()
	ctx := context.Background()
	c := mustClient(t, admin)
	all := []string{"get", "list", "watch"}
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "limited-pod-ipam-agent"}, Rules: []rbacv1.PolicyRule{
		{APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{""}, Resources: []string{"nodes", "namespaces", "configmaps"}, Verbs: all},
		{APIGroups: []string{"mooring.dev"}, Resources: []string{"podippools"}, Verbs: all},
		{APIGroups: []string{"mooring.dev"}, Resources: []string{"podipamnodes"}, Verbs: append(all, "create", "update")},
		{APIGroups: []string{"events.k8s.io"}, Resources: []string{"events"}, Verbs: []string{"create", "patch"}},
	}}
	bind := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "limited-pod-ipam-agent"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "User", Name: "limited-agent", APIGroup: "rbac.authorization.k8s.io"}}}
	if err := c.Create(ctx, role); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, bind); err != nil {
		t.Fatal(err)
	}
	rc := rest.CopyConfig(admin)
	rc.Impersonate = rest.ImpersonationConfig{UserName: "limited-agent"}
	// The binding takes effect within the authorizer's cache refresh.
	lc := mustClient(t, rc)
	eventually(t, 10*time.Second, "the limited agent's role is in effect", func() error {
		var l corev1.PodList
		if err := lc.List(ctx, &l); err != nil {
			return err
		}
		var p corev1.Pod
		if err := lc.Get(ctx, client.ObjectKey{Namespace: "default", Name: "x"}, &p); !apierrors.IsForbidden(err) {
			return fmt.Errorf("get pod: %v, want Forbidden", err)
		}
		return nil
	})
	return rc
}

func mustClient(t *testing.T, rc *rest.Config) client.Client {
	t.Helper()
	c, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return c
}
