package podipame2e

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/mooringlb/mooring/internal/lab"
)

// TestPodIPAMLabNode: the lab's nodes in CNI mode behave as a kubelet's
// do towards the pod network.
func TestPodIPAMLabNode(t *testing.T) {
	e := start(t, lab.PodIPAMMultiPool, lab.PodNetworkPTP)
	t.Run("NetworkReady follows the CNI STATUS", func(t *testing.T) { checkNetworkReady(t, e) })
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
