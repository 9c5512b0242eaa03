package migrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/testenv"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

var (
	gvrIPPool = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "ipaddresspools"}
	gvrL2Adv  = schema.GroupVersionResource{Group: "metallb.io", Version: "v1beta1", Resource: "l2advertisements"}
)

func crd(t *testing.T, dc dynamic.Interface, gvr schema.GroupVersionResource, kind string) {
	t.Helper()
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": gvr.Resource + "." + gvr.Group},
		"spec": map[string]any{"group": gvr.Group, "scope": "Namespaced",
			"versions": []any{map[string]any{"name": gvr.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			"names": map[string]any{"kind": kind, "plural": gvr.Resource, "listKind": kind + "List", "singular": strings.ToLower(kind)}},
	}}
	_, err := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
		Create(context.Background(), obj, metav1.CreateOptions{})
	must(t, err)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := dc.Resource(gvr).List(context.Background(), metav1.ListOptions{}); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("CRD %s never served: %v", gvr.Resource, err)
		}
	}
}

// installMetalLB creates what a MetalLB install looks like to the API: a
// speaker DaemonSet, a controller Deployment, a pool and an advertisement,
// and a validating webhook without a backend that guards MetalLB's
// objects (so deleting them before the webhook fails, as in the field).
func installMetalLB(t *testing.T, cs kubernetes.Interface, dc dynamic.Interface) {
	installMetalLBPool(t, cs, dc, "192.0.2.200-192.0.2.210")
	ctx := context.Background()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "d"}}, metav1.CreateOptions{})
	must(t, err)
	svc, err := cs.CoreV1().Services("d").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "web"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	must(t, err)
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.200"}}
	_, err = cs.CoreV1().Services("d").UpdateStatus(ctx, svc, metav1.UpdateOptions{})
	must(t, err)
}

// installMetalLBPool installs MetalLB's pieces with one pool of addresses.
func installMetalLBPool(t *testing.T, cs kubernetes.Interface, dc dynamic.Interface, addresses string) {
	ctx := context.Background()
	crd(t, dc, gvrIPPool, "IPAddressPool")
	crd(t, dc, gvrL2Adv, "L2Advertisement")
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system"}}, metav1.CreateOptions{})
	must(t, err)
	tmpl := func(c string) corev1.PodTemplateSpec {
		return corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": "metallb", "component": c}},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: c, Image: "quay.io/metallb/" + c + ":v0.16.0"}}}}
	}
	speaker := tmpl("speaker")
	// As metallb-native.yaml runs it: memberlist on (bind address and
	// labels set), on its default port 7946, on the nodes' network.
	speaker.Spec.HostNetwork = true
	speaker.Spec.Containers[0].Env = []corev1.EnvVar{
		{Name: "METALLB_ML_BIND_ADDR", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "status.podIP"}}},
		{Name: "METALLB_ML_LABELS", Value: "app=metallb,component=speaker"}}
	sel := func(c string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": "metallb", "component": c}}
	}
	_, err = cs.AppsV1().DaemonSets("metallb-system").Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "speaker", Labels: map[string]string{"app": "metallb", "component": "speaker"}},
		Spec:       appsv1.DaemonSetSpec{Selector: sel("speaker"), Template: speaker}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.AppsV1().Deployments("metallb-system").Create(ctx, &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "controller", Labels: map[string]string{"app": "metallb", "component": "controller"}},
		Spec:       appsv1.DeploymentSpec{Selector: sel("controller"), Template: tmpl("controller")}}, metav1.CreateOptions{})
	must(t, err)
	_, err = dc.Resource(gvrIPPool).Namespace("metallb-system").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "IPAddressPool", "metadata": map[string]any{"name": "lan"},
		"spec": map[string]any{"addresses": []any{addresses}}}}, metav1.CreateOptions{})
	must(t, err)
	_, err = dc.Resource(gvrL2Adv).Namespace("metallb-system").Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "metallb.io/v1beta1", "kind": "L2Advertisement", "metadata": map[string]any{"name": "l2"},
		"spec": map[string]any{"ipAddressPools": []any{"lan"}}}}, metav1.CreateOptions{})
	must(t, err)
	fail := admissionv1.Fail
	none := admissionv1.SideEffectClassNone
	_, err = cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Create(ctx, &admissionv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "metallb-webhook-configuration"},
		Webhooks: []admissionv1.ValidatingWebhook{{
			Name:                    "ipaddresspoolvalidationwebhook.metallb.io",
			ClientConfig:            admissionv1.WebhookClientConfig{Service: &admissionv1.ServiceReference{Namespace: "metallb-system", Name: "metallb-webhook-service", Path: ptr.To("/validate")}},
			Rules:                   []admissionv1.RuleWithOperations{{Operations: []admissionv1.OperationType{admissionv1.Delete}, Rule: admissionv1.Rule{APIGroups: []string{"metallb.io"}, APIVersions: []string{"v1beta1"}, Resources: []string{"ipaddresspools"}}}},
			FailurePolicy:           &fail,
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
		}},
	}, metav1.CreateOptions{})
	must(t, err)
}

// playAgent stands in for Mooring's agent on node-1: the Node exists and
// its agent's L2Announcer sees only itself alive, so once the migration
// applies Mooring's policy, internal/agent/status.Announcements names node-1.
func playAgent(t *testing.T, ctx context.Context, cs kubernetes.Interface, c client.Client) {
	_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}, metav1.CreateOptions{})
	must(t, err)
	l := &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}
	must(t, c.Create(ctx, l))
	l.Status.Members = []string{"node-1"}
	must(t, c.Status().Update(ctx, l))
}

// Against a real apiserver holding a MetalLB install: run refuses to start
// while a pre-check fails (IPVS without strictARP; a stale local address,
// naming the node), then walks every step: Mooring's pool applied while
// MetalLB runs, the address unchanged, the speakers scaled away, the
// webhook deleted before MetalLB's objects (which it would block), the
// traffic probe never failing.
func TestMigrateRun(t *testing.T) {
	env := testenv.StartT(t)
	cs := env.Clientset
	dc, err := dynamic.NewForConfig(env.Config)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	installMetalLB(t, cs, dc)
	lease := controllerLease(t, ctx, cs, "true")
	kp, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy"},
		Data: map[string]string{"config.conf": "mode: ipvs\nipvs:\n  strictARP: false\n"}}, metav1.CreateOptions{})
	must(t, err)
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") }))
	defer web.Close()
	dir := t.TempDir()
	o := Options{Namespace: "metallb-system", ImportFile: filepath.Join(dir, "mooring.yaml"), SaveDir: filepath.Join(dir, "saved"),
		Probe: web.URL, ProbeInterval: 50 * time.Millisecond, CheckTimeout: 20 * time.Second}
	pools := schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "loadbalancerippools"}

	// MetalLB in another namespace than the flag says: a usage error naming it.
	if _, err := CheckFinished(ctx, Options{Namespace: "metallb", LeaseNamespace: controller.DefaultLeaseNamespace, LeaseName: controller.DefaultLeaseName}, cs, dc); !isUsage(err) ||
		!strings.Contains(err.Error(), "pass --metallb-namespace metallb-system") {
		t.Fatalf("wrong --metallb-namespace: %v", err)
	}

	var out, errOut bytes.Buffer
	// 1. IPVS without strictARP: refused, nothing changed.
	err = Run(ctx, o, cs, dc, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "pre-check failed, nothing was changed") || !strings.Contains(err.Error(), "strictARP") {
		t.Fatalf("IPVS without strictARP: err %v", err)
	}
	if l, _ := dc.Resource(pools).List(ctx, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Fatal("a refused run applied pools")
	}
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cs.CoreV1().ConfigMaps(kp.Namespace).Get(ctx, kp.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Data["config.conf"] = "mode: ipvs\nipvs:\n  strictARP: true\n"
		_, err = cs.CoreV1().ConfigMaps(kp.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}))

	// 2. A stale kube-ipvs0-style address on node-3 (as its agent reports it).
	svc, err := cs.CoreV1().Services("d").Get(ctx, "web", metav1.GetOptions{})
	must(t, err)
	ev, err := cs.CoreV1().Events("d").Create(ctx, &corev1.Event{ObjectMeta: metav1.ObjectMeta{GenerateName: "web."},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: "d", Name: "web", UID: svc.UID},
		Reason:         mooringv1.EventReasonStaleLocalAddress, Type: corev1.EventTypeWarning,
		Message: "node node-3 has 192.0.2.200 configured on kube-ipvs0 and its kernel answers ARP/NDP for it",
		Source:  corev1.EventSource{Component: "mooring-agent", Host: "node-3"}, FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	}, metav1.CreateOptions{})
	must(t, err)
	err = Run(ctx, o, cs, dc, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "node-3") || !strings.Contains(err.Error(), "arp_ignore") {
		t.Fatalf("stale address on node-3: err %v", err)
	}
	must(t, cs.CoreV1().Events("d").Delete(ctx, ev.Name, metav1.DeleteOptions{}))

	// 2b. A Mooring controller that would write MetalLB's Services (it
	// publishes its flags on its Lease): refused, naming the fix.
	setAdoptOnly(t, ctx, cs, lease, "false")
	err = Run(ctx, o, cs, dc, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "pre-check failed") || !strings.Contains(err.Error(), "restart it with --adopt-only") {
		t.Fatalf("controller without --adopt-only: err %v", err)
	}
	setAdoptOnly(t, ctx, cs, lease, "true")

	// 2c. Mooring's agents (the chart's DaemonSet) on the speakers' memberlist
	// port, both on the nodes' network: refused, naming the chart value.
	checkGossipClash(t, ctx, cs, dc, o)

	// 3. The whole migration, with a pod of MetalLB's controller running
	// (stop.go's path: its Deployment and ReplicaSet deleted orphaning,
	// the pod with a grace period, waited for until gone).
	stopped := runControllerPod(t, ctx, cs)
	playAgent(t, ctx, cs, env.Client)
	o.reader = env.Client
	out.Reset()
	if err := Run(ctx, o, cs, dc, &out, &errOut); err != nil {
		var ee cliutil.ExitError
		errors.As(err, &ee)
		t.Fatalf("run: %v\n%s\n%s", err, out.String(), errOut.String())
	}
	t.Log(out.String())
	if !strings.Contains(out.String(), " 0 failed") {
		t.Errorf("traffic failed during the migration:\n%s", out.String())
	}
	svc, err = cs.CoreV1().Services("d").Get(ctx, "web", metav1.GetOptions{})
	must(t, err)
	if len(svc.Status.LoadBalancer.Ingress) != 1 || svc.Status.LoadBalancer.Ingress[0].IP != "192.0.2.200" {
		t.Errorf("address changed: %+v", svc.Status.LoadBalancer.Ingress)
	}
	if l, _ := dc.Resource(pools).List(ctx, metav1.ListOptions{}); len(l.Items) != 1 || l.Items[0].GetName() != "lan" {
		t.Errorf("Mooring pools: %+v", l)
	}
	for what, err := range map[string]error{
		"speaker DaemonSet": getErr(cs.AppsV1().DaemonSets("metallb-system").Get(ctx, "speaker", metav1.GetOptions{})),
		"controller":        getErr(cs.AppsV1().Deployments("metallb-system").Get(ctx, "controller", metav1.GetOptions{})),
		"webhook":           getErr(cs.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "metallb-webhook-configuration", metav1.GetOptions{})),
		"MetalLB pool":      getErr(dc.Resource(gvrIPPool).Namespace("metallb-system").Get(ctx, "lan", metav1.GetOptions{})),
		"MetalLB L2 adv":    getErr(dc.Resource(gvrL2Adv).Namespace("metallb-system").Get(ctx, "l2", metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s not removed: %v", what, err)
		}
	}
	stopped.check(t)
	saved, err := os.ReadFile(filepath.Join(dir, "saved", "metallb-objects.yaml"))
	if err != nil || !strings.Contains(string(saved), "192.0.2.200-192.0.2.210") {
		t.Errorf("saved MetalLB objects: %v\n%s", err, saved)
	}

	// 4. After the migration (issue 18): plan says there is nothing to
	// migrate — it asked for --metallb-namespace before — and lists what
	// MetalLB left behind, each with the command that removes it.
	_, err = cs.CoreV1().Secrets("metallb-system").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "memberlist"},
		Data: map[string][]byte{"secretkey": []byte("k")}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "metallb-system:speaker",
		Labels: map[string]string{"app": "metallb"}}}, metav1.CreateOptions{})
	must(t, err)
	f, err := CheckFinished(ctx, o.withLeaseDefaults(), cs, dc)
	if err != nil || f == nil || !f.NothingToMigrate || !f.ControllerAdoptOnly {
		t.Fatalf("after the migration: %+v, %v", f, err)
	}
	out.Reset()
	must(t, f.WriteText(&out, o.withLeaseDefaults()))
	for _, want := range []string{
		"Nothing to migrate",
		"still runs --adopt-only",
		"kubectl delete crd ipaddresspools.metallb.io",
		"kubectl delete crd l2advertisements.metallb.io",
		"kubectl delete clusterrole metallb-system:speaker",
		"kubectl -n metallb-system delete secret memberlist",
		"kubectl delete namespace metallb-system",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan after the migration lacks %q:\n%s", want, out.String())
		}
	}
	t.Logf("plan after the migration:\n%s", out.String())
}

func isUsage(err error) bool {
	var ue cliutil.UsageError
	return errors.As(err, &ue)
}

// controllerLease is the Lease a leading Mooring controller holds, with the
// --adopt-only it publishes there.
func controllerLease(t *testing.T, ctx context.Context, cs kubernetes.Interface, adoptOnly string) *coordinationv1.Lease {
	t.Helper()
	_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: controller.DefaultLeaseNamespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	l, err := cs.CoordinationV1().Leases(controller.DefaultLeaseNamespace).Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: controller.DefaultLeaseName, Annotations: map[string]string{controller.AnnotationAdoptOnly: adoptOnly}},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("mooring-controller-0"), LeaseDurationSeconds: ptr.To[int32](3600),
			AcquireTime: &now, RenewTime: &now},
	}, metav1.CreateOptions{})
	must(t, err)
	return l
}

// setAdoptOnly publishes --adopt-only=value on the controller's Lease, as
// a restarted controller would; read-modify-write with retry, since the
// test's other writers (and the apiserver's own) may bump the Lease.
func setAdoptOnly(t *testing.T, ctx context.Context, cs kubernetes.Interface, lease *coordinationv1.Lease, value string) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cs.CoordinationV1().Leases(lease.Namespace).Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if cur.Annotations == nil {
			cur.Annotations = map[string]string{}
		}
		cur.Annotations[controller.AnnotationAdoptOnly] = value
		_, err = cs.CoordinationV1().Leases(lease.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}))
}

func getErr[T any](_ T, err error) error { return err }

// checkGossipClash installs Mooring's agent DaemonSet as the chart renders
// it by default (hostNetwork, --gossip-port=7946): run refuses before
// changing anything and names agent.flags.gossipPort; with the port moved
// (as `--set agent.flags.gossipPort=7947` renders it) the check passes.
func checkGossipClash(t *testing.T, ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, o Options) {
	t.Helper()
	labels := map[string]string{"app.kubernetes.io/name": "mooring", "app.kubernetes.io/component": "agent"}
	ds, err := cs.AppsV1().DaemonSets(controller.DefaultLeaseNamespace).Create(ctx, &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Name: "mooring-agent", Labels: labels},
		Spec: appsv1.DaemonSetSpec{Selector: &metav1.LabelSelector{MatchLabels: labels}, Template: corev1.PodTemplateSpec{
			ObjectMeta: metav1.ObjectMeta{Labels: labels},
			Spec: corev1.PodSpec{HostNetwork: true, Containers: []corev1.Container{{Name: "agent", Image: "ghcr.io/mooringlb/mooring:test",
				Args: []string{"agent", "--gossip-port=7946", "--node-name=$(NODE_NAME)"}}}}}}}, metav1.CreateOptions{})
	must(t, err)
	var out, errOut bytes.Buffer
	err = Run(ctx, o, cs, dc, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "pre-check failed, nothing was changed") || !strings.Contains(err.Error(), "gossip-port-free") ||
		!strings.Contains(err.Error(), "hold port 7946") || !strings.Contains(err.Error(), "--set agent.flags.gossipPort=7947") {
		t.Fatalf("agents on the speakers' memberlist port: err %v", err)
	}
	t.Logf("refused: %v", err)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := cs.AppsV1().DaemonSets(ds.Namespace).Get(ctx, ds.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Spec.Template.Spec.Containers[0].Args[1] = "--gossip-port=7947"
		_, err = cs.AppsV1().DaemonSets(ds.Namespace).Update(ctx, cur, metav1.UpdateOptions{})
		return err
	}))
}

// controllerStop is what the stand-in kubelet and garbage collector of
// runControllerPod saw.
type controllerStop struct {
	mu sync.Mutex
	// grace is the pod's deletion grace period; orphaned the objects
	// deleted orphaning their dependents (the "orphan" finalizer), as
	// first seen deleted; rsFirst says the ReplicaSet was deleted when the
	// pod was (else it could have replaced the pod).
	grace    *int64
	orphaned []string
	deleted  []string
	rsFirst  bool
}

// runControllerPod gives MetalLB's controller Deployment a ReplicaSet and
// a pod bound to node-1, as kube-controller-manager would, and stands in
// for what the test's API server lacks (until ctx ends): the kubelet,
// which confirms a deleted pod's removal once its container stopped (at
// once here), and the garbage collector, which finishes an orphaning
// delete (takes the "orphan" finalizer off).
func runControllerPod(t *testing.T, ctx context.Context, cs kubernetes.Interface) *controllerStop {
	t.Helper()
	dep, err := cs.AppsV1().Deployments("metallb-system").Get(ctx, "controller", metav1.GetOptions{})
	must(t, err)
	labels := dep.Spec.Selector.MatchLabels
	rs, err := cs.AppsV1().ReplicaSets("metallb-system").Create(ctx, &appsv1.ReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: "controller-7d4f", Labels: labels, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "Deployment", Name: dep.Name, UID: dep.UID, Controller: ptr.To(true)}}},
		Spec: appsv1.ReplicaSetSpec{Selector: dep.Spec.Selector, Template: dep.Spec.Template}}, metav1.CreateOptions{})
	must(t, err)
	_, err = cs.CoreV1().Pods("metallb-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "controller-7d4f-x2x9k", Labels: labels, OwnerReferences: []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: rs.Name, UID: rs.UID, Controller: ptr.To(true)}}},
		Spec: *dep.Spec.Template.Spec.DeepCopy()}, metav1.CreateOptions{})
	must(t, err)
	// Bound to a node: the API server then keeps the deleted pod until
	// its kubelet confirms (an unbound pod goes at once, whatever grace).
	must(t, cs.CoreV1().Pods("metallb-system").Bind(ctx, &corev1.Binding{ObjectMeta: metav1.ObjectMeta{Name: "controller-7d4f-x2x9k"},
		Target: corev1.ObjectReference{Kind: "Node", Name: "node-1"}}, metav1.CreateOptions{}))
	st := &controllerStop{}
	seen := map[string]bool{}
	note := func(what string, fin []string) {
		st.mu.Lock()
		defer st.mu.Unlock()
		if !seen[what] {
			seen[what] = true
			st.deleted = append(st.deleted, what)
			if slices.Contains(fin, metav1.FinalizerOrphanDependents) {
				st.orphaned = append(st.orphaned, what)
			}
		}
	}
	// The garbage collector's part: take the "orphan" finalizer off.
	noOrphan := func(f []string) []string {
		return slices.DeleteFunc(f, func(s string) bool { return s == metav1.FinalizerOrphanDependents })
	}
	deps, rss := cs.AppsV1().Deployments("metallb-system"), cs.AppsV1().ReplicaSets("metallb-system")
	go func() {
		for ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			if d, err := deps.Get(ctx, "controller", metav1.GetOptions{}); err == nil && d.DeletionTimestamp != nil {
				note("Deployment", d.Finalizers)
				_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					d, err := deps.Get(ctx, "controller", metav1.GetOptions{})
					if err == nil {
						d.Finalizers = noOrphan(d.Finalizers)
						_, err = deps.Update(ctx, d, metav1.UpdateOptions{})
					}
					return err
				})
			}
			if r, err := rss.Get(ctx, rs.Name, metav1.GetOptions{}); err == nil && r.DeletionTimestamp != nil {
				note("ReplicaSet", r.Finalizers)
				_ = retry.RetryOnConflict(retry.DefaultRetry, func() error {
					r, err := rss.Get(ctx, rs.Name, metav1.GetOptions{})
					if err == nil {
						r.Finalizers = noOrphan(r.Finalizers)
						_, err = rss.Update(ctx, r, metav1.UpdateOptions{})
					}
					return err
				})
			}
			if p, err := cs.CoreV1().Pods("metallb-system").Get(ctx, "controller-7d4f-x2x9k", metav1.GetOptions{}); err == nil && p.DeletionTimestamp != nil {
				note("Pod", p.Finalizers)
				r, err := rss.Get(ctx, rs.Name, metav1.GetOptions{})
				st.mu.Lock()
				st.grace = p.DeletionGracePeriodSeconds
				st.rsFirst = apierrors.IsNotFound(err) || (err == nil && r.DeletionTimestamp != nil)
				st.mu.Unlock()
				_ = cs.CoreV1().Pods("metallb-system").Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
			}
		}
	}()
	return st
}

// check: the Deployment and its ReplicaSet went orphaning, the ReplicaSet
// before the pod, which was deleted with a grace period (its kubelet
// removes it from the API only once its container stopped); Run waited
// until the pod was gone.
func (st *controllerStop) check(t *testing.T) {
	t.Helper()
	st.mu.Lock()
	defer st.mu.Unlock()
	slices.Sort(st.deleted)
	slices.Sort(st.orphaned)
	if !slices.Equal(st.deleted, []string{"Deployment", "Pod", "ReplicaSet"}) || !slices.Equal(st.orphaned, []string{"Deployment", "ReplicaSet"}) || !st.rsFirst {
		t.Errorf("MetalLB's controller: deleted %v, orphaning %v, the ReplicaSet before the pod: %v; want all three, the Deployment and ReplicaSet orphaning, the ReplicaSet first",
			st.deleted, st.orphaned, st.rsFirst)
	}
	if st.grace == nil || *st.grace == 0 {
		t.Errorf("MetalLB's controller pod deleted with grace %v: a pod deleted with 0 leaves the API before its container stopped", st.grace)
	}
}
