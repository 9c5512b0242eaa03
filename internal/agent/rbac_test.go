package agent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	authv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/testenv"
)

const (
	agentNamespace = "mooring-system"
	agentSA        = "mooring-agent"
)

// installAgentRBAC applies the shipped namespace-scoped ServiceAccount,
// the generated ClusterRoles (the agent's and fast eviction's, as with
// --fast-endpoint-eviction), their bindings and the admission policies: the
// one that binds L2Announcer writes to the caller's node, and fast
// eviction's two (which change, which pods).
func installAgentRBAC(ctx context.Context, cs kubernetes.Interface) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	read := func(path string, into any) error {
		b, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return err
		}
		return yaml.Unmarshal(b, into)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	var sa corev1.ServiceAccount
	var role, evictRole rbacv1.ClusterRole
	var binding, evictBinding rbacv1.ClusterRoleBinding
	for path, obj := range map[string]any{"config/agent/serviceaccount.yaml": &sa, "config/rbac/agent/role.yaml": &role,
		"config/agent/clusterrolebinding.yaml": &binding, "config/rbac/agent-eviction/role.yaml": &evictRole,
		"config/rbac/agent-eviction/role_binding.yaml": &evictBinding} {
		if err := read(path, obj); err != nil {
			return err
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts(agentNamespace).Create(ctx, &sa, metav1.CreateOptions{}); err != nil {
		return err
	}
	for _, r := range []*rbacv1.ClusterRole{&role, &evictRole} {
		if _, err := cs.RbacV1().ClusterRoles().Create(ctx, r, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, b := range []*rbacv1.ClusterRoleBinding{&binding, &evictBinding} {
		if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, b, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	for _, f := range []string{"admissionpolicy-pods.yaml", "admissionpolicy-eviction.yaml"} {
		if err := installPolicy(ctx, cs, filepath.Join(root, "config/agent", f)); err != nil {
			return err
		}
	}
	return installPolicy(ctx, cs, filepath.Join(root, "config/agent/admissionpolicy.yaml"))
}

// installPolicy applies a file holding ValidatingAdmissionPolicies, each
// followed by its binding.
func installPolicy(ctx context.Context, cs kubernetes.Interface, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	docs := strings.Split(string(b), "\n---\n")
	if len(docs) == 0 || len(docs)%2 != 0 {
		return os.ErrInvalid
	}
	for i := 0; i < len(docs); i += 2 {
		var pol admissionv1.ValidatingAdmissionPolicy
		var pb admissionv1.ValidatingAdmissionPolicyBinding
		if yaml.Unmarshal([]byte(docs[i]), &pol) != nil || yaml.Unmarshal([]byte(docs[i+1]), &pb) != nil || pol.Name == "" || pb.Spec.PolicyName != pol.Name {
			return fmt.Errorf("%s: document %d: want a ValidatingAdmissionPolicy and its binding: %w", path, i, os.ErrInvalid)
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicies().Create(ctx, &pol, metav1.CreateOptions{}); err != nil {
			return err
		}
		if _, err := cs.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings().Create(ctx, &pb, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// agentToken returns a token of the agent's ServiceAccount as the kubelet
// gives it to the agent's pod on node: bound to a pod scheduled there, so
// it carries the node's name. node "" gives an unbound token.
func agentToken(ctx context.Context, cs kubernetes.Interface, node string) (string, error) {
	req := &authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(3600))}}
	if node != "" {
		pod, err := cs.CoreV1().Pods(agentNamespace).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: "mooring-agent-" + node},
			Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: agentSA,
				Containers: []corev1.Container{{Name: "agent", Image: "mooring"}}},
		}, metav1.CreateOptions{})
		if err != nil {
			return "", err
		}
		req.Spec.BoundObjectRef = &authv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID}
	}
	tok, err := cs.CoreV1().ServiceAccounts(agentNamespace).CreateToken(ctx, agentSA, req, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tok.Status.Token, nil
}

// An agent's ServiceAccount cannot write Services, and can write only the
// L2Announcer of the node its token is bound to.
func TestAgentCannotTouchServicesOrOtherNodes(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cs := env.Clientset
	if err := installAgentRBAC(ctx, cs); err != nil {
		t.Fatal(err)
	}
	var nodeA *corev1.Node
	for _, n := range []string{"node-a", "node-b"} {
		node, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if n == "node-a" {
			nodeA = node
		}
	}
	svc := corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}
	if err := env.Client.Create(ctx, &svc); err != nil {
		t.Fatal(err)
	}
	as := func(node string) client.Client {
		t.Helper()
		tok, err := agentToken(ctx, cs, node)
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(env.Config)
		cfg.BearerToken = tok
		c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	agentA, unbound := as("node-a"), as("")

	// Services: readable, never writable.
	if err := agentA.List(ctx, &corev1.ServiceList{}); err != nil {
		t.Fatalf("the agent cannot read Services: %v", err)
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"spec":{"externalIPs":["192.0.2.66"]}}`))
	if err := agentA.Patch(ctx, &svc, patch); !apierrors.IsForbidden(err) {
		t.Fatalf("Service patch by the agent: %v, want Forbidden", err)
	}
	if err := agentA.Status().Patch(ctx, &svc, client.RawPatch(types.MergePatchType, []byte(`{"status":{"loadBalancer":{"ingress":[{"ip":"192.0.2.66"}]}}}`))); !apierrors.IsForbidden(err) {
		t.Fatalf("Service status patch by the agent: %v, want Forbidden", err)
	}

	// Its own node's L2Announcer, owned by the Node as the agent writes
	// it: create and status update allowed.
	own := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "node-a", OwnerReferences: []metav1.OwnerReference{{
		APIVersion: "v1", Kind: "Node", Name: nodeA.Name, UID: nodeA.UID, BlockOwnerDeletion: ptr.To(false)}}}}
	if err := agentA.Create(ctx, own); err != nil {
		t.Fatalf("creating its own L2Announcer: %v", err)
	}
	own.Status.Members = []string{"node-a"}
	if err := agentA.Status().Update(ctx, own); err != nil {
		t.Fatalf("updating its own L2Announcer: %v", err)
	}
	// Another node's: denied by the admission policy, even to create. The
	// API server enforces a new policy once its policy cache has it (a
	// loaded machine took over a second once): until then a create passes
	// and is undone, and the policy must deny within 30 s.
	other := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		err := agentA.Create(ctx, other.DeepCopy())
		if err != nil && strings.Contains(err.Error(), "only the L2Announcer of its own node (node-a)") {
			break
		}
		if err == nil {
			if err := env.Client.Delete(ctx, other.DeepCopy()); err != nil {
				t.Fatal(err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("node-a creating node-b's L2Announcer: %v, want denied", err)
		}
	}
	if err := env.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	other.Status.Members = []string{"node-a"}
	if err := agentA.Status().Update(ctx, other); err == nil || !strings.Contains(err.Error(), "own node") {
		t.Fatalf("node-a updating node-b's L2Announcer: %v, want denied", err)
	}
	// A token bound to no pod names no node: no L2Announcer at all.
	own.Status.Members = []string{"node-a", "node-b"}
	if err := unbound.Status().Update(ctx, own); err == nil || !strings.Contains(err.Error(), "names no node") {
		t.Fatalf("an unbound token updating node-a's L2Announcer: %v, want denied", err)
	}
}
