package agent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/evict"
	"github.com/mooringlb/mooring/internal/testenv"
)

// readyPod creates a running, Ready pod bound to node, as a kubelet would
// report it.
func readyPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, node string) *corev1.Pod {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "web"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.9.9", PodIPs: []corev1.PodIP{{IP: "10.244.9.9"}},
		Conditions: []corev1.PodCondition{
			{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
			{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		}}
	p, err = cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func condition(p *corev1.Pod, t corev1.PodConditionType) corev1.PodCondition {
	for _, c := range p.Status.Conditions {
		if c.Type == t {
			return c
		}
	}
	return corev1.PodCondition{}
}

// The agent's pods/status permission (fast endpoint eviction) is narrowed
// by config/agent/admissionpolicy-pods.yaml to the one change it makes:
// Ready and ContainersReady False with its reason. It cannot mark a pod
// Ready, touch another condition, the phase, the addresses, or the labels
// (which pods/status could otherwise change, and Services select by).
func TestAgentPodStatusPolicy(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := env.Clientset
	if err := installAgentRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"node-a", "node-b"} {
		if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// node-a's agent lists node-b as lost (the eviction policy, tested in
	// TestAgentEvictionBound, allows nothing else).
	an := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "node-a"}}
	if err := env.Client.Create(ctx, an); err != nil {
		t.Fatal(err)
	}
	an.Status.Lost = []string{"node-b"}
	if err := env.Client.Status().Update(ctx, an); err != nil {
		t.Fatal(err)
	}
	tok, err := agentToken(ctx, cs, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tok
	as := kubernetes.NewForConfigOrDie(cfg)
	pods := as.CoreV1().Pods("default")
	patch := func(name, body string, dryRun ...string) error {
		_, err := pods.Patch(ctx, name, types.StrategicMergePatchType, []byte(body), metav1.PatchOptions{DryRun: dryRun}, "status")
		return err
	}
	// Policies take a moment to be enforced after creation: each denial
	// is tried (as a dry run, so an early success changes nothing) until
	// it is one.
	p := readyPod(ctx, t, cs, "web-1", "node-b")
	deny := func(what, body, want string) {
		t.Helper()
		var err error
		for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			if err = patch(p.Name, body, metav1.DryRunAll); err != nil && strings.Contains(err.Error(), want) {
				return
			}
		}
		t.Errorf("%s: %v, want denied with %q", what, err, want)
	}
	deny("marking a pod Ready", `{"status":{"conditions":[{"type":"Ready","status":"True","reason":"`+evict.PodReasonNodeUnreachable+`"}]}}`,
		"may only set Ready and ContainersReady to False")
	deny("NotReady with another reason", `{"status":{"conditions":[{"type":"Ready","status":"False","reason":"Other"}]}}`,
		"may only set Ready and ContainersReady to False")
	deny("another condition", `{"status":{"conditions":[{"type":"PodScheduled","status":"False"}]}}`,
		"only the Ready and ContainersReady conditions")
	deny("the phase", `{"status":{"phase":"Failed"}}`, "phase, addresses or container statuses")
	deny("the pod IPs", `{"status":{"podIPs":[{"ip":"10.244.9.9"},{"ip":"fd00:244::9"}]}}`, "phase, addresses or container statuses")
	deny("labels through pods/status", `{"metadata":{"labels":{"app":"other"}}}`, "labels or annotations")

	// The change fast eviction makes is allowed, and the kubelet (here the
	// admin) takes it back.
	notReady := `{"status":{"conditions":[` +
		`{"type":"Ready","status":"False","reason":"` + evict.PodReasonNodeUnreachable + `","message":"node-b is dead","lastTransitionTime":"2026-01-01T00:00:00Z"},` +
		`{"type":"ContainersReady","status":"False","reason":"` + evict.PodReasonNodeUnreachable + `","message":"node-b is dead","lastTransitionTime":"2026-01-01T00:00:00Z"}]}}`
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		err := patch(p.Name, notReady)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent marking a pod NotReady: %v", err)
		}
	}
	got, err := cs.CoreV1().Pods("default").Get(ctx, p.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c := condition(got, corev1.PodReady); c.Status != corev1.ConditionFalse || c.Reason != evict.PodReasonNodeUnreachable ||
		condition(got, corev1.PodScheduled).Status != corev1.ConditionTrue || got.Status.PodIP != "10.244.9.9" {
		t.Fatalf("after the patch: %+v", got.Status)
	}
	// Writing it again (a second decider) is allowed too: unchanged.
	if err := patch(p.Name, notReady); err != nil {
		t.Fatalf("repeating the patch: %v", err)
	}
	got.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, got, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the kubelet restoring Ready: %v", err)
	}
	// Not a policy matter, but RBAC: the agent may not delete or evict pods.
	if err := pods.Delete(ctx, p.Name, metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("pod delete by the agent: %v, want Forbidden", err)
	}
}
