package agent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/evict"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/testenv"
)

// notReadyBody is fast eviction's pod status patch (the readiness policy
// allows exactly this change).
const notReadyBody = `{"status":{"conditions":[` +
	`{"type":"Ready","status":"False","reason":"` + evict.PodReasonNodeUnreachable + `","message":"dead"},` +
	`{"type":"ContainersReady","status":"False","reason":"` + evict.PodReasonNodeUnreachable + `","message":"dead"}]}}`

// The eviction bound (config/agent/admissionpolicy-eviction.yaml), with
// real pod-bound tokens: a compromised node's agent cannot mark NotReady
// the pods of a live node, nor its own node's (even listed), nor of a node
// only another L2Announcer lists, nor with a token that names no node;
// it can once its own L2Announcer lists the node in status.lost, and no
// longer once it is cleared.
func TestAgentEvictionBound(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := env.Clientset
	if err := installAgentRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}
	nodes := map[string]*corev1.Node{}
	for _, n := range []string{"node-a", "node-b", "node-c"} {
		node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		nodes[n] = node
		readyPod(ctx, t, cs, "web-"+n, n)
	}
	agentA, agentAClient := agentClients(ctx, t, env, "node-a")
	unbound, _ := agentClients(ctx, t, env, "")
	mark := func(as kubernetes.Interface, node string, dryRun ...string) error {
		_, err := as.CoreV1().Pods("default").Patch(ctx, "web-"+node, types.StrategicMergePatchType, []byte(notReadyBody),
			metav1.PatchOptions{DryRun: dryRun}, "status")
		return err
	}
	// A policy, and a change of the L2Announcer it reads, take a moment
	// to reach the API server's admission: each outcome is polled for (as
	// dry runs, so an early success changes nothing).
	// want: any of the messages (a pod both policies refuse is refused
	// with either's, in the API server's order).
	denied := func(what string, as kubernetes.Interface, node string, want ...string) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err = mark(as, node, metav1.DryRunAll); err != nil && slices.ContainsFunc(want, func(w string) bool { return strings.Contains(err.Error(), w) }) {
				return
			}
		}
		t.Errorf("%s: %v, want denied with one of %q", what, err, want)
	}
	allowed := func(what string, node string) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err = mark(agentA, node, metav1.DryRunAll); err == nil {
				return
			}
		}
		t.Errorf("%s: %v, want allowed", what, err)
	}
	// node-a's agent creates its L2Announcer, listing nothing.
	own := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "node-a", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: "node-a", UID: nodes["node-a"].UID, BlockOwnerDeletion: ptr.To(false)}}}}
	if err := agentAClient.Create(ctx, own); err != nil {
		t.Fatal(err)
	}
	// node-b's (written by the administrator here) lists node-c: that
	// counts for node-b's agent only.
	other := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Status.Lost = []string{"node-c"}
	if err := env.Client.Status().Update(ctx, other); err != nil {
		t.Fatal(err)
	}
	denied("a live node's pod, nothing listed", agentA, "node-b", "node-b is not listed")
	denied("its own node's pod", agentA, "node-a", "may not mark pods of its own node", "node-a is not listed")
	denied("a pod of a node only another L2Announcer lists", agentA, "node-c", "node-c is not listed")
	denied("a token bound to no pod", unbound, "node-b", "its token names no node")

	setLost := func(lost ...string) {
		t.Helper()
		if err := agentAClient.Get(ctx, client.ObjectKeyFromObject(own), own); err != nil {
			t.Fatal(err)
		}
		own.Status.Lost = lost
		if err := agentAClient.Status().Update(ctx, own); err != nil {
			t.Fatalf("node-a's agent listing %v in its status.lost: %v", lost, err)
		}
	}
	setLost("node-a", "node-b")
	allowed("node-b listed in node-a's status.lost", "node-b")
	denied("its own node's pod, listed", agentA, "node-a", "may not mark pods of its own node")
	denied("a pod of an unlisted node", agentA, "node-c", "node-c is not listed")
	if err := mark(agentA, "node-b"); err != nil {
		t.Fatalf("marking the listed node's pod: %v", err)
	}
	p, err := cs.CoreV1().Pods("default").Get(ctx, "web-node-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(p, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != evict.PodReasonNodeUnreachable {
		t.Fatalf("web-node-b after the allowed mark: %+v", c)
	}
	// Cleared (the node is back): denied again.
	setLost()
	denied("node-b after it was cleared", agentA, "node-b", "node-b is not listed")
	// Nor can the agent list nodes in another node's L2Announcer.
	other.Status.Lost = []string{"node-c", "node-b"}
	if err := agentAClient.Status().Update(ctx, other); err == nil || !strings.Contains(err.Error(), "own node") {
		t.Errorf("node-a's agent writing node-b's status.lost: %v, want denied", err)
	}
	// With no L2Announcer left the policy has no params: everyone else's
	// pod status updates (a kubelet's, here the administrator's) must go
	// through (parameterNotFoundAction Deny refused them all; CI saw it).
	for _, a := range []*mooringv1.L2Announcer{own, other} {
		if err := env.Client.Delete(ctx, a); err != nil {
			t.Fatal(err)
		}
	}
	// Allowed throughout the seconds the API server takes to see the
	// deletions (with Deny, refusals start within about a second).
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		_, err := cs.CoreV1().Pods("default").Patch(ctx, "web-node-c", types.StrategicMergePatchType, []byte(notReadyBody),
			metav1.PatchOptions{DryRun: []string{metav1.DryRunAll}}, "status")
		if err != nil {
			t.Fatalf("a pod status update with no L2Announcer in the cluster: %v, want allowed", err)
		}
	}
}

// agentClients are clients of the agent's ServiceAccount with a token
// bound to a pod on node ("" gives an unbound token).
func agentClients(ctx context.Context, t *testing.T, env *testenv.Env, node string) (kubernetes.Interface, client.Client) {
	t.Helper()
	tok, err := agentToken(ctx, env.Clientset, node)
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tok
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return kubernetes.NewForConfigOrDie(cfg), c
}
