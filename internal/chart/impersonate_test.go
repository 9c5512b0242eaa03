package chart

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/testenv"
)

// Who may write what, proved on a real API server: each component's
// ServiceAccount is impersonated as a real pod-bound token of it
// authenticates (user, groups and the node-name extra, read back with a
// TokenReview) and tries every write its roles and the admission policies
// must refuse, and the writes it needs. The same list runs against
// config/'s manifests and the chart's rendered objects, side by side. Every
// attempt is a dry run: authorized and admitted like a real write, never
// stored, so a write wrongly allowed changes nothing for the next one.

// install is one way of installing Mooring, as the test applies it.
type install struct {
	name           string // "config/" or "chart", for messages
	ns             string // the components' namespace (mode ConfigMap, Lease)
	prefix         string // object name prefix: <prefix>-agent-own-node
	controller     string // ServiceAccount names
	agent          string
	nodeA, nodeB   string // the agent runs on nodeA; nodeB is another live node
	objs           []*unstructured.Unstructured
	controllerID   rest.ImpersonationConfig
	agentID        rest.ImpersonationConfig
	unboundAgent   *actor // the agent's ServiceAccount with a token bound to no pod (no node)
	blockA, blockB string // nodeA's and nodeB's pod address blocks
}

// configInstall is config/'s plain manifests: the controller, the agent,
// pod IPAM's roles (config/podipam), fast eviction's role
// (config/rbac/agent-eviction) and BGP's (config/bgp), as docs/install.md
// and docs/bgp.md apply them.
func configInstall(t *testing.T) *install {
	in := &install{name: "config/", ns: "mooring-system", prefix: "mooring", controller: "mooring-controller",
		agent: "mooring-agent", nodeA: "cfg-a", nodeB: "cfg-b", blockA: "10.244.1.0/26", blockB: "10.244.2.0/26"}
	for _, dir := range []string{"config/controller", "config/agent", "config/podipam", "config/rbac/agent-eviction", "config/bgp"} {
		in.objs = append(in.objs, kustomizeObjects(t, filepath.Join(root(t), dir))...)
	}
	return in
}

// chartInstall is the chart rendered with pod IPAM, BGP and fast endpoint
// eviction on, as release "mooring" in its own namespace (fullnameOverride
// keeps its cluster-wide names apart from config/'s).
func chartInstall(t *testing.T) *install {
	in := &install{name: "chart", ns: "mooring-chart", prefix: "chart", controller: "chart-controller",
		agent: "chart-agent", nodeA: "chart-a", nodeB: "chart-b", blockA: "10.245.1.0/26", blockB: "10.245.2.0/26"}
	in.objs = renderRelease(t, "mooring", "--namespace", in.ns, "--set", "fullnameOverride=chart",
		"--set", "agent.gossipKey.value="+testKey, "--set", "controller.flags.podIpamMode=multi-pool",
		"--set", "agent.flags.fastEndpointEviction=true", "--set", "agent.flags.bgp=true")
	return in
}

// kustomizeObjects reads the objects of a kustomization's resources
// (files, and folders with their own kustomization), as `kubectl apply -k`
// would; the manifests set their namespaces themselves.
func kustomizeObjects(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var k struct {
		Resources []string `json:"resources"`
	}
	if err := yaml.Unmarshal(b, &k); err != nil {
		t.Fatalf("%s: %v", dir, err)
	}
	var out []*unstructured.Unstructured
	for _, r := range k.Resources {
		p := filepath.Join(dir, r)
		if st, err := os.Stat(p); err == nil && st.IsDir() {
			out = append(out, kustomizeObjects(t, p)...)
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, decode(t, string(b))...)
	}
	return out
}

// apply applies the install's objects except the CRDs (the control plane
// has config/crd's; the chart's are the same, TestCRDsAreConfigCRDs) and
// the workloads (no kubelet runs them here).
func (in *install) apply(ctx context.Context, a *applier) {
	var objs []*unstructured.Unstructured
	for _, o := range in.objs {
		switch o.GetKind() {
		case "CustomResourceDefinition", "Deployment", "DaemonSet", "PodDisruptionBudget":
			continue
		}
		objs = append(objs, o)
	}
	a.apply(ctx, objs)
}

// podIdentity is who a pod of ServiceAccount sa on node is to the API
// server: the user info of a token bound to such a pod, as the kubelet
// gives it (a TokenReview reads it back: username, groups and the extra
// authentication.kubernetes.io/node-name and pod-name).
func podIdentity(t *testing.T, ctx context.Context, cs kubernetes.Interface, ns, sa, node string) rest.ImpersonationConfig {
	t.Helper()
	pod, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: sa + "-" + node},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: sa,
			Containers: []corev1.Container{{Name: "c", Image: "mooring"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		ExpirationSeconds: ptr.To(int64(3600)),
		BoundObjectRef:    &authnv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rev, err := cs.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{Spec: authnv1.TokenReviewSpec{Token: tok.Status.Token}}, metav1.CreateOptions{})
	if err != nil || !rev.Status.Authenticated {
		t.Fatalf("TokenReview of %s/%s's pod token: %v %s", ns, sa, err, rev.Status.Error)
	}
	u := rev.Status.User
	if want := "system:serviceaccount:" + ns + ":" + sa; u.Username != want {
		t.Fatalf("token of %s/%s authenticates as %q", ns, sa, u.Username)
	}
	extra := map[string][]string{}
	for k, v := range u.Extra {
		extra[k] = v
	}
	if got := extra["authentication.kubernetes.io/node-name"]; !slices.Equal(got, []string{node}) {
		t.Fatalf("a pod-bound token on %s carries node-name %v: the API server does not put the node into tokens (Kubernetes 1.32+)", node, got)
	}
	return rest.ImpersonationConfig{UserName: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra}
}

// actor is a client acting as one identity.
type actor struct {
	cs kubernetes.Interface
	c  client.Client
}

func newActor(t *testing.T, env *testenv.Env, id rest.ImpersonationConfig) *actor {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = id
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	return &actor{cs: cs, c: client.NewDryRunClient(c)}
}

// attempt is one write (or read) an identity tries.
type attempt struct {
	what  string
	allow bool
	do    func(ctx context.Context, a *actor) error
}

// run tries every attempt and returns what went against expectations: a
// refused write must be Forbidden (by RBAC or an admission policy), an
// allowed one must succeed (a create of an existing object may end in
// AlreadyExists: that comes after authorization and admission).
func run(ctx context.Context, a *actor, who string, attempts []attempt) []string {
	var bad []string
	for _, at := range attempts {
		err := at.do(ctx, a)
		switch {
		case at.allow && err != nil && !apierrors.IsAlreadyExists(err):
			bad = append(bad, fmt.Sprintf("%s may %s, but: %v", who, at.what, err))
		case !at.allow && !apierrors.IsForbidden(err):
			bad = append(bad, fmt.Sprintf("%s must not %s, but got %v (want Forbidden)", who, at.what, errOrAllowed(err)))
		}
	}
	return bad
}

func errOrAllowed(err error) any {
	if err == nil {
		return "allowed"
	}
	return err
}

// check runs both components' lists until they hold (RBAC and admission
// policies reach the API server's caches a moment after they are written)
// or until the timeout, and returns what still does not hold.
func (in *install) check(t *testing.T, env *testenv.Env, until func(bad []string) bool) []string {
	t.Helper()
	ctx := context.Background()
	agent, ctrl := newActor(t, env, in.agentID), newActor(t, env, in.controllerID)
	var bad []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		bad = append(run(ctx, agent, in.name+" agent", agentAttempts(in, env.Client)), run(ctx, ctrl, in.name+" controller", controllerAttempts(in, env.Client))...)
		if until(bad) || time.Now().After(deadline) {
			return bad
		}
	}
}

// seed creates what the attempts act on, as an administrator: two live
// Nodes, each with its pod address block and L2Announcer, the recorded
// mode, a Service, a Ready pod on the other node, the controller's Lease.
func (in *install) seed(t *testing.T, ctx context.Context, env *testenv.Env) {
	t.Helper()
	c := env.Client
	for i, n := range []string{in.nodeA, in.nodeB} {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}
		must(t, c.Create(ctx, node))
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("192.0.2.%d", 10+i)}}
		must(t, c.Status().Update(ctx, node))
		rec := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
		must(t, c.Create(ctx, rec))
		rec.Status.Blocks = []mooringv1.PodIPAMBlock{{Pool: "default", CIDR: []string{in.blockA, in.blockB}[i]}}
		must(t, c.Status().Update(ctx, rec))
	}
	// Fast eviction's bound: nodeA's agent lists a dead node (and, to no
	// avail, itself) in status.lost; nodeB's lists nodeB, which counts
	// for nodeB's agent only.
	for n, lost := range map[string][]string{in.nodeA: {in.nodeA, in.deadNode()}, in.nodeB: {in.nodeA, in.nodeB}} {
		an := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: n}}
		must(t, c.Create(ctx, an))
		an.Status.Lost = lost
		must(t, c.Status().Update(ctx, an))
	}
	for _, ns := range []string{in.ns, "kube-system"} {
		err := c.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "bgp-pass"},
			Data: map[string][]byte{"password": []byte("x")}})
		if !apierrors.IsAlreadyExists(err) { // kube-system's is shared by both installs
			must(t, err)
		}
	}
	must(t, c.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: in.ns, Name: "mooring-pod-ipam-mode"},
		Data: map[string]string{"mode": "multi-pool"}}))
	must(t, c.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: in.ns, Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}))
	for _, n := range []string{in.nodeA, in.nodeB, in.deadNode()} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: in.ns, Name: "web-" + n},
			Spec: corev1.PodSpec{NodeName: n, Containers: []corev1.Container{{Name: "web", Image: "web"}}}}
		must(t, c.Create(ctx, pod))
		pod.Status.Phase = corev1.PodRunning
		pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}
		must(t, c.Status().Update(ctx, pod))
	}
	in.controllerID = podIdentity(t, ctx, env.Clientset, in.ns, in.controller, in.nodeA)
	in.agentID = podIdentity(t, ctx, env.Clientset, in.ns, in.agent, in.nodeA)
	in.unboundAgent = newActor(t, env, rest.ImpersonationConfig{UserName: in.agentID.UserName, Groups: in.agentID.Groups})
}

// deadNode is a node gossip lost: nodeA's agent lists it in status.lost
// (no Node object: the policy reads only the pod and the L2Announcer).
func (in *install) deadNode() string { return in.nodeB + "-dead" }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// Both installs, one API server: every write the roles and policies must
// refuse is Forbidden, every write the components need is allowed.
func TestImpersonatedServiceAccounts(t *testing.T) {
	env := testenv.StartT(t)
	ctx := context.Background()
	a := newApplier(t, env.Config)
	installs := []*install{configInstall(t)}
	if haveHelm(t) {
		installs = append(installs, chartInstall(t))
	}
	for _, in := range installs {
		in.apply(ctx, a)
		in.seed(t, ctx, env)
	}
	for _, in := range installs {
		t.Run(strings.TrimSuffix(in.name, "/"), func(t *testing.T) {
			for _, b := range in.check(t, env, func(bad []string) bool { return len(bad) == 0 }) {
				t.Error(b)
			}
		})
	}
	// The same list fails when the roles are merged back (the agent bound
	// to the controller's pod IPAM role, as before the split) and when the
	// own-node policy is gone: each holds something the test must see.
	in := installs[0]
	t.Run("merged roles fail", func(t *testing.T) {
		undo := bindToAgent(t, ctx, env, in, in.prefix+"-controller-pod-ipam")
		defer undo()
		bad := in.check(t, env, func(bad []string) bool { return hasAll(bad, "patch another Node", "change the recorded pod IPAM mode") })
		if !hasAll(bad, "patch another Node", "write another Node's addresses", "change the recorded pod IPAM mode", "write its own PodIPAMNode's status") {
			t.Errorf("with the roles merged the check still passes:\n%s", strings.Join(bad, "\n"))
		}
	})
	t.Run("no own-node policy fails", func(t *testing.T) {
		undo := withoutPolicyBinding(t, ctx, env, in.prefix+"-agent-own-node")
		defer undo()
		bad := in.check(t, env, func(bad []string) bool { return hasAll(bad, "put another node's block into its spec.release") })
		if !hasAll(bad, "put another node's block into its spec.release", "write another node's L2Announcer") {
			t.Errorf("without the own-node policy the check still passes:\n%s", strings.Join(bad, "\n"))
		}
	})
	// Each of the two eviction policies: without the first the agent may
	// mark its own node's pods and use an unbound token; without the
	// second, a live node's.
	for _, in := range installs {
		for policy, evictions := range map[string][]string{
			"-agent-eviction":      {"mark a pod of its own node NotReady", "mark a pod NotReady with an unbound token"},
			"-agent-eviction-lost": {"mark a pod on a live node NotReady"},
		} {
			t.Run("no "+strings.TrimPrefix(policy, "-")+" policy fails/"+strings.TrimSuffix(in.name, "/"), func(t *testing.T) {
				undo := withoutPolicyBinding(t, ctx, env, in.prefix+policy)
				defer undo()
				bad := in.check(t, env, func(bad []string) bool { return hasAll(bad, evictions...) })
				if !hasAll(bad, evictions...) {
					t.Errorf("without the %s policy the check still passes:\n%s", in.prefix+policy, strings.Join(bad, "\n"))
				}
			})
		}
	}
}

func hasAll(bad []string, whats ...string) bool {
	for _, w := range whats {
		if !slices.ContainsFunc(bad, func(b string) bool { return strings.Contains(b, w) }) {
			return false
		}
	}
	return true
}

// bindToAgent binds the ClusterRole and Role named role to the install's
// agent as well, and returns the undo.
func bindToAgent(t *testing.T, ctx context.Context, env *testenv.Env, in *install, role string) func() {
	t.Helper()
	subj := []rbacv1.Subject{{Kind: "ServiceAccount", Name: in.agent, Namespace: in.ns}}
	meta := metav1.ObjectMeta{Name: "merged-back", Namespace: in.ns}
	crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "merged-back"}, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role}}
	rb := &rbacv1.RoleBinding{ObjectMeta: meta, Subjects: subj,
		RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: role}}
	must(t, env.Client.Create(ctx, crb))
	must(t, env.Client.Create(ctx, rb))
	return func() {
		must(t, env.Client.Delete(ctx, crb))
		must(t, env.Client.Delete(ctx, rb))
	}
}

// withoutPolicyBinding deletes a ValidatingAdmissionPolicyBinding and
// returns the undo, which puts it back.
func withoutPolicyBinding(t *testing.T, ctx context.Context, env *testenv.Env, name string) func() {
	t.Helper()
	bindings := env.Clientset.AdmissionregistrationV1().ValidatingAdmissionPolicyBindings()
	b, err := bindings.Get(ctx, name, metav1.GetOptions{})
	must(t, err)
	must(t, bindings.Delete(ctx, name, metav1.DeleteOptions{}))
	return func() {
		b.ResourceVersion, b.UID = "", ""
		_, err := bindings.Create(ctx, b, metav1.CreateOptions{})
		must(t, err)
	}
}
