package podipame2e

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
)

// TestPodIPAMLabNode: the lab's nodes in CNI mode behave as a kubelet's
// do towards the pod network.
func TestPodIPAMLabNode(t *testing.T) {
	e := start(t, lab.PodIPAMMultiPool, lab.PodNetworkPTP)
	t.Run("NetworkReady follows the CNI STATUS", func(t *testing.T) { checkNetworkReady(t, e) })
	t.Run("a second pool's pods reach Services unmasqueraded", func(t *testing.T) { checkNoSNAT(t, e) })
}

// checkNoSNAT: a pod of the pool "blue" (10.245.0.0/16, outside
// kube-proxy's --cluster-cidr) calls a ClusterIP Service of both families
// whose backends run on its own node and on another: every backend sees
// the client pod's own address, never its node's (no masquerade).
func checkNoSNAT(t *testing.T, e *env) {
	parent := e.t
	e.t = t
	defer func() { e.t = parent }()
	e.kubectl(`apiVersion: mooring.dev/v1alpha1
kind: PodIPPool
metadata: {name: blue}
spec:
  ipv4: {cidrs: [10.245.0.0/16], maskSize: 26}
  ipv6: {cidrs: ["fd00:245::/112"], maskSize: 122}
---
apiVersion: v1
kind: Namespace
metadata:
  name: blue
  annotations: {`+mooringv1.AnnotationPodIPPool+`: blue}
`, "apply", "-f", "-")
	backends := []podSpec{{"nosnat-1", "default", "node-1", ""}, {"nosnat-2", "default", "node-2", ""}}
	client := []podSpec{{"blue-client", "blue", "node-1", ""}}
	e.applyPods(append(backends, client...))
	svc := e.service("default", "nosnat")
	e.ready(backends, podsReadyWithin)
	cl := e.ready(client, podsReadyWithin)[0]
	ips := podIPs(&cl)
	if len(ips) != 2 || !netip.MustParsePrefix("10.245.0.0/16").Contains(ips[0]) {
		t.Fatalf("blue client addresses %v, want 10.245.0.0/16 and fd00:245::/112", ips)
	}
	for _, cip := range svc.Spec.ClusterIPs {
		to := netip.AddrPortFrom(netip.MustParseAddr(cip), 80)
		want := ips[0]
		if to.Addr().Is6() {
			want = ips[1]
		}
		seen := map[string]bool{}
		for try := 0; len(seen) < 2; try++ {
			if try == 60 {
				t.Fatalf("Service %s: only backends %v answered in 60 tries", to, seen)
			}
			body, err := labtest.GetFromPod(pid(t, &cl), to, 3*time.Second)
			if err != nil || !strings.HasPrefix(body, "pod=") {
				time.Sleep(200 * time.Millisecond) // endpoints may lag
				continue
			}
			backend, client := echoField(body, "pod"), echoField(body, "client")
			seen[backend] = true
			if ap, err := netip.ParseAddrPort(client); err != nil || ap.Addr() != want {
				t.Fatalf("Service %s: backend %s saw client %s, want the pod's own %s (masqueraded?)", to, backend, client, want)
			}
		}
		t.Logf("Service %s: backends %v saw the blue pod's %s", to, seen, want)
	}
}

// echoField reads key=value from the lab echo's answer.
func echoField(body, key string) string {
	for _, f := range strings.Fields(body) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return ""
}

// checkNetworkReady stops node-2's agent: its CNI STATUS fails (code 50)
// and the Node goes NotReady with a kubelet's reason and message while the
// other nodes stay Ready; started again, the Node is Ready again.
func checkNetworkReady(t *testing.T, e *env) {
	const node = "node-2"
	if c := nodeReady(t, e, node); c.Status != corev1.ConditionTrue {
		t.Fatalf("%s not Ready at the start: %+v", node, c)
	}
	if err := e.r.Cluster.StopAgent(node); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	c := waitReady(t, e, node, corev1.ConditionFalse, 60*time.Second)
	t.Logf("%s NotReady %v after its agent stopped: %s: %s", node, time.Since(t0).Round(100*time.Millisecond), c.Reason, c.Message)
	for _, w := range []string{"container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: ", "(CNI error code 50)"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("NotReady message lacks %q: %s", w, c.Message)
		}
	}
	if c.Reason != "KubeletNotReady" {
		t.Errorf("NotReady reason %q, want KubeletNotReady", c.Reason)
	}
	for _, other := range []string{"node-1", "node-3"} {
		if c := nodeReady(t, e, other); c.Status != corev1.ConditionTrue {
			t.Errorf("%s: %+v while only %s's agent is stopped", other, c, node)
		}
	}
	if err := e.r.Cluster.StartAgent(node); err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	waitReady(t, e, node, corev1.ConditionTrue, 90*time.Second)
	t.Logf("%s Ready %v after its agent started again", node, time.Since(t0).Round(100*time.Millisecond))
}

func nodeReady(t *testing.T, e *env, node string) corev1.NodeCondition {
	t.Helper()
	n, err := e.cs.CoreV1().Nodes().Get(e.ctx, node, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c
		}
	}
	return corev1.NodeCondition{}
}

func waitReady(t *testing.T, e *env, node string, want corev1.ConditionStatus, limit time.Duration) corev1.NodeCondition {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		c := nodeReady(t, e, node)
		if c.Status == want {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Ready is %s after %v, want %s: %s", node, c.Status, limit, want, c.Message)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
