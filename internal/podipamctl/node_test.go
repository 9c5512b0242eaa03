package podipamctl_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/podipam"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

// startNode runs the agent side of pod IPAM for node and returns a client
// on its socket.
func startNode(t *testing.T, e *testenv.Env, node string, grace time.Duration, opts ...func(*podipamctl.NodeConfig)) *ipamd.Client {
	t.Helper()
	dir := t.TempDir()
	cfg := podipamctl.NodeConfig{REST: e.Config, NodeName: node, Namespace: ns,
		StateDir: filepath.Join(dir, "state"), Socket: filepath.Join(dir, "ipamd.sock"),
		PreAllocate: 8, Grace: grace, Interval: 100 * time.Millisecond}
	for _, o := range opts {
		o(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- podipamctl.RunNode(ctx, cfg) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("RunNode: %v", err)
		}
	})
	return ipamd.NewClient(cfg.Socket)
}

// add creates the pod (the agent refuses to choose a pool for a pod the
// API server does not know) and retries its ADD while the node has no room
// yet, as a kubelet retries.
func add(t *testing.T, c client.Client, cl *ipamd.Client, id, namespace, pod string) ipamd.Allocation {
	t.Helper()
	mkPod(t, c, namespace, pod)
	var al ipamd.Allocation
	eventually(t, 30*time.Second, "ADD "+id, func() error {
		var err error
		al, err = cl.Add(context.Background(), ipamd.AddRequest{Key: ipamd.Key{ContainerID: id, IfName: "eth0"}, Namespace: namespace, Pod: pod})
		var ce *ipamd.CallError
		if errors.As(err, &ce) && ce.Kind != ipamd.KindNoBlock && ce.Kind != ipamd.KindUnavailable {
			t.Fatalf("ADD %s: %v", id, err)
		}
		return err
	})
	return al
}

// mkPod creates a pod on node-1 unless it exists.
func mkPod(t *testing.T, c client.Client, namespace, name string) {
	t.Helper()
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := c.Create(context.Background(), p); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func inBlocks(a netip.Addr, bs []netip.Prefix) bool {
	for _, b := range bs {
		if b.Contains(a) {
			return true
		}
	}
	return false
}

// TestNodeSideMultiPool runs the controller and one node's agent side on a
// real apiserver: a namespace annotation picks the pool, a pod annotation
// overrides it, 70 pods of a pool take a second block, and the pool's
// blocks go back after the grace period once its pods are gone.
func TestNodeSideMultiPool(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, []string{"fd00:244::/112"}, 120)
	mkPool(t, c, "tenant-a", []string{"10.250.0.0/16"}, 26, nil, 0)
	for _, n := range []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "tenant-a", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "tenant-a"}}},
	} {
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	override := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "tenant-a", Name: "special", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "default"}},
		Spec: corev1.PodSpec{NodeName: "node-1", Containers: []corev1.Container{{Name: "c", Image: "x"}}}}
	if err := c.Create(ctx, override); err != nil {
		t.Fatal(err)
	}
	mkBareNode(t, c, "node-1")
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})
	cl := startNode(t, e, "node-1", 500*time.Millisecond)

	def := add(t, c, cl, "web", "default", "web")
	if len(def.IPs) != 2 || def.Pool != "default" || !inBlocks(def.IPs[0].Address.Addr(), blocks(t, c, "node-1", "default")) {
		t.Fatalf("default pod: %+v", def)
	}
	if al := add(t, c, cl, "special", "tenant-a", "special"); al.Pool != "default" {
		t.Fatalf("the pod annotation did not override the namespace: %+v", al)
	}
	seen := map[netip.Addr]bool{}
	for i := range 70 {
		al := add(t, c, cl, fmt.Sprintf("t%d", i), "tenant-a", fmt.Sprintf("t%d", i))
		a := al.IPs[0].Address.Addr()
		if al.Pool != "tenant-a" || len(al.IPs) != 1 || !netip.MustParsePrefix("10.250.0.0/16").Contains(a) || seen[a] {
			t.Fatalf("tenant pod %d: %+v", i, al)
		}
		seen[a] = true
	}
	if b := blocks(t, c, "node-1", "tenant-a"); len(b) != 2 {
		t.Fatalf("70 tenant-a pods hold blocks %v, want two /26", b)
	}
	for i := range 70 {
		if err := cl.Del(ctx, ipamd.Key{ContainerID: fmt.Sprintf("t%d", i), IfName: "eth0"}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, 30*time.Second, "tenant-a blocks released after the grace period", func() error {
		if b := blocks(t, c, "node-1", "tenant-a"); len(b) != 0 {
			return fmt.Errorf("still %v", b)
		}
		return nil
	})
	if b := blocks(t, c, "node-1", "default"); len(b) != 2 {
		t.Fatalf("the default pool's blocks went too: %v", b)
	}
	if err := cl.Status(ctx); err != nil {
		t.Fatalf("STATUS: %v", err)
	}

	// A pool of one /30 (one pod address): the second pod's ADD fails
	// with a message that names the pool and quotes the controller.
	mkPool(t, c, "tiny", []string{"10.251.0.0/30"}, 30, nil, 0)
	tiny := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "tiny", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "tiny"}}}
	ghost := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ghost", Annotations: map[string]string{mooringv1.AnnotationPodIPPool: "nope"}}}
	for _, n := range []*corev1.Namespace{tiny, ghost} {
		if err := c.Create(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	add(t, c, cl, "tiny-1", "tiny", "tiny-1")
	mkPod(t, c, "tiny", "tiny-2")
	mkPod(t, c, "ghost", "g")
	eventually(t, 30*time.Second, "exhausted pool named in the ADD error", func() error {
		_, err := cl.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{ContainerID: "tiny-2", IfName: "eth0"}, Namespace: "tiny", Pod: "tiny-2"})
		if err == nil || !strings.Contains(err.Error(), `pool "tiny"`) || !strings.Contains(err.Error(), "exhausted") {
			return fmt.Errorf("ADD error %v", err)
		}
		return nil
	})
	eventually(t, 10*time.Second, "unknown pool named in the ADD error", func() error {
		_, err := cl.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{ContainerID: "g", IfName: "eth0"}, Namespace: "ghost", Pod: "g"})
		if err == nil || !strings.Contains(err.Error(), `PodIPPool "nope" named by the mooring.dev/pod-ip-pool annotation of namespace ghost does not exist`) {
			return fmt.Errorf("ADD error %v", err)
		}
		return nil
	})
	// Issue 18: the pod itself says why (the CNI error alone reaches only
	// the kubelet's log), and so does the exhausted pool's.
	for _, w := range []struct{ ns, pod, reason, says string }{
		{"ghost", "g", podipamctl.ReasonPoolNotFound, "create it or fix the annotation"},
		{"tiny", "tiny-2", podipamctl.ReasonPoolExhausted, `pool "tiny"`},
	} {
		eventually(t, 20*time.Second, "Event "+w.reason+" on pod "+w.ns+"/"+w.pod, func() error {
			return podEvent(ctx, e, w.ns, w.pod, w.reason, w.says)
		})
	}
}

// podEvent finds a Warning Event with reason about the pod whose note
// contains says.
func podEvent(ctx context.Context, e *testenv.Env, namespace, pod, reason, says string) error {
	evs, err := e.Clientset.EventsV1().Events(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, ev := range evs.Items {
		if ev.Regarding.Kind == "Pod" && ev.Regarding.Name == pod && ev.Reason == reason && ev.Type == corev1.EventTypeWarning &&
			strings.Contains(ev.Note, says) && ev.Regarding.UID != "" {
			return nil
		}
	}
	return fmt.Errorf("%d events in %s, none %s on pod %s saying %q", len(evs.Items), namespace, reason, pod, says)
}

// TestNodeSideKubernetesMode: the agent takes node.spec.podCIDRs, and with
// --pod-routes=direct routes the other nodes' podCIDRs via their
// InternalIPs, following nodes as they come and go.
func TestNodeSideKubernetesMode(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	if err := podipamctl.LockMode(ctx, e.Client, ns, podipamctl.ModeKubernetes, "test"); err != nil {
		t.Fatal(err)
	}
	for i, n := range []string{"node-1", "node-2", "node-3"} {
		mkNode(t, e.Client, n, fmt.Sprintf("10.244.%d.0/24", i+3), fmt.Sprintf("fd00:244:%d::/64", i+3))
		var nd corev1.Node
		if err := e.Client.Get(ctx, client.ObjectKey{Name: n}, &nd); err != nil {
			t.Fatal(err)
		}
		nd.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.0.2.%d", i+1)}, {Type: corev1.NodeInternalIP, Address: fmt.Sprintf("2001:db8::%d", i+1)}}
		if err := e.Client.Status().Update(ctx, &nd); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	var routes []podipam.Route
	cl := startNode(t, e, "node-1", time.Minute, func(c *podipamctl.NodeConfig) {
		c.PodRoutes = "direct"
		c.SetRoutes = func(r []podipam.Route) error { mu.Lock(); routes = r; mu.Unlock(); return nil }
	})
	al := add(t, e.Client, cl, "web", "default", "web")
	if len(al.IPs) != 2 || al.IPs[0].Address.String() != "10.244.3.2/24" || al.IPs[1].Address.String() != "fd00:244:3::2/64" {
		t.Fatalf("allocation %+v", al)
	}
	want := "[{10.244.4.0/24 192.0.2.2} {10.244.5.0/24 192.0.2.3} {fd00:244:4::/64 2001:db8::2} {fd00:244:5::/64 2001:db8::3}]"
	eventually(t, 10*time.Second, "direct routes", func() error {
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(routes) != want {
			return fmt.Errorf("routes %v, want %v", routes, want)
		}
		return nil
	})
	if err := e.Client.Delete(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "routes to a deleted node removed", func() error {
		mu.Lock()
		defer mu.Unlock()
		if fmt.Sprint(routes) != "[{10.244.4.0/24 192.0.2.2} {fd00:244:4::/64 2001:db8::2}]" {
			return fmt.Errorf("routes %v", routes)
		}
		return nil
	})
}

// TestNodeSideWaitsForTheMode: an agent started before the controller ever
// recorded a mode (a fresh install where the DaemonSet wins the race) must
// start serving pod addresses when the mode appears, not stay off until it
// is restarted.
func TestNodeSideWaitsForTheMode(t *testing.T) {
	e := startEnv(t)
	c := e.Client
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, nil, 0)
	mkBareNode(t, c, "node-1")
	cl := startNode(t, e, "node-1", time.Minute)
	if _, err := cl.Add(context.Background(), ipamd.AddRequest{Key: ipamd.Key{ContainerID: "early", IfName: "eth0"}, Namespace: "default", Pod: "early"}); err == nil {
		t.Fatal("ADD succeeded before any pod IPAM mode was recorded")
	}
	time.Sleep(300 * time.Millisecond) // the agent is waiting on its watch by now
	if err := podipamctl.LockMode(context.Background(), c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})
	if al := add(t, c, cl, "web", "default", "web"); len(al.IPs) != 1 || !inBlocks(al.IPs[0].Address.Addr(), blocks(t, c, "node-1", "default")) {
		t.Fatalf("allocation %+v", al)
	}
}
