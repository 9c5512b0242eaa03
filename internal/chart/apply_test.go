package chart

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/testenv"
)

const fieldManager = "mooring-chart-test"

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// applier applies unstructured objects server-side, CRDs first.
type applier struct {
	t      *testing.T
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

func newApplier(t *testing.T, cfg *rest.Config) *applier {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &applier{t: t, dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}
}

func (a *applier) resource(o *unstructured.Unstructured) dynamic.ResourceInterface {
	a.t.Helper()
	gvk := o.GroupVersionKind()
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		a.t.Fatalf("%s %s: %v", gvk, o.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(o.GetNamespace())
	}
	return a.dyn.Resource(m.Resource)
}

// apply creates the namespaces the objects name, applies the CRDs, waits
// until they are served, then applies everything else.
func (a *applier) apply(ctx context.Context, objs []*unstructured.Unstructured) {
	a.t.Helper()
	for _, o := range objs {
		if ns := o.GetNamespace(); ns != "" {
			a.ensureNamespace(ctx, ns)
		}
	}
	var crds, rest []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			crds = append(crds, o)
		} else {
			rest = append(rest, o)
		}
	}
	for _, o := range crds {
		a.applyOne(ctx, o)
	}
	for _, o := range crds {
		a.waitEstablished(ctx, o.GetName())
	}
	a.mapper.Reset()
	for _, o := range rest {
		a.applyOne(ctx, o)
	}
}

func (a *applier) applyOne(ctx context.Context, o *unstructured.Unstructured) {
	a.t.Helper()
	if _, err := a.resource(o).Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		a.t.Fatalf("server-side apply %s %s/%s: %v", o.GetKind(), o.GetNamespace(), o.GetName(), err)
	}
}

func (a *applier) ensureNamespace(ctx context.Context, name string) {
	a.t.Helper()
	ns := &unstructured.Unstructured{}
	ns.SetAPIVersion("v1")
	ns.SetKind("Namespace")
	ns.SetName(name)
	_, err := a.dyn.Resource(corev1.SchemeGroupVersion.WithResource("namespaces")).Apply(ctx, name, ns, metav1.ApplyOptions{FieldManager: fieldManager})
	if err != nil {
		a.t.Fatalf("namespace %s: %v", name, err)
	}
}

func (a *applier) waitEstablished(ctx context.Context, name string) {
	a.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		crd, err := a.dyn.Resource(crdGVR).Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				c := c.(map[string]any)
				if c["type"] == "Established" && c["status"] == "True" {
					return
				}
			}
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("CRD %s not established after 30s (%v)", name, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// monitorCRDs stand in for the Prometheus Operator's CRDs (our own minimal
// fixtures: the kinds exist, every field is accepted).
func monitorCRDs() []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, kind := range []string{"PodMonitor", "ServiceMonitor"} {
		plural := strings.ToLower(kind) + "s"
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1",
			"kind":       "CustomResourceDefinition",
			"metadata":   map[string]any{"name": plural + ".monitoring.coreos.com"},
			"spec": map[string]any{
				"group": "monitoring.coreos.com",
				"scope": "Namespaced",
				"names": map[string]any{"kind": kind, "listKind": kind + "List", "plural": plural, "singular": strings.ToLower(kind)},
				"versions": []any{map[string]any{
					"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{
						"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
				}},
			},
		}})
	}
	return out
}

// can asks the apiserver's RBAC authorizer whether a ServiceAccount may do
// something.
func can(t *testing.T, env *testenv.Env, sa, verb, group, resource, sub, ns string) bool {
	t.Helper()
	r, err := env.Clientset.AuthorizationV1().SubjectAccessReviews().Create(context.Background(), &authv1.SubjectAccessReview{
		Spec: authv1.SubjectAccessReviewSpec{
			User: sa,
			ResourceAttributes: &authv1.ResourceAttributes{
				Verb: verb, Group: group, Resource: resource, Subresource: sub, Namespace: ns,
			},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return r.Status.Allowed
}

// helm template's output, default and non-default, is accepted by a real
// kube-apiserver (server-side apply), and the bindings give the
// ServiceAccounts what the roles say.
func TestApplyToAPIServer(t *testing.T) {
	helmBin(t)
	env := testenv.StartT(t)
	ctx := context.Background()
	a := newApplier(t, env.Config)
	a.apply(ctx, monitorCRDs())
	// Three releases side by side; their cluster-scoped objects (roles,
	// bindings) must not collide, so each has its own name.
	for _, r := range []struct{ release, ns, file string }{
		{"mooring", "mooring-system", "default-values.yaml"},
		{"mooring", "mooring-custom", "custom-values.yaml"}, // fullnameOverride: lb
		{"agents", "mooring-agents", "nokey-values.yaml"},
	} {
		file := r.file
		objs := renderRelease(t, r.release, "--namespace", r.ns, "-f", filepath.Join(Dir, "ci", file))
		a.apply(ctx, objs)
		for _, o := range objs {
			if _, err := a.resource(o).Get(ctx, o.GetName(), metav1.GetOptions{}); err != nil {
				t.Errorf("%s: %s %s/%s not found after apply: %v", file, o.GetKind(), o.GetNamespace(), o.GetName(), err)
			}
		}
	}
	for _, c := range []struct {
		sa, verb, group, resource, sub, ns string
		want                               bool
	}{
		{"system:serviceaccount:mooring-system:mooring-controller", "patch", "", "services", "status", "", true},
		{"system:serviceaccount:mooring-system:mooring-controller", "update", "coordination.k8s.io", "leases", "", "mooring-system", true},
		{"system:serviceaccount:mooring-system:mooring-controller", "update", "coordination.k8s.io", "leases", "", "kube-system", false},
		{"system:serviceaccount:mooring-system:mooring-controller", "list", "", "secrets", "", "", false},
		{"system:serviceaccount:mooring-custom:lb-ipam", "update", "coordination.k8s.io", "leases", "", "mooring-leases", true},
		{"system:serviceaccount:mooring-system:mooring-agent", "watch", "discovery.k8s.io", "endpointslices", "", "", true},
		{"system:serviceaccount:mooring-system:mooring-agent", "patch", "", "services", "status", "", false},
		{"system:serviceaccount:mooring-agents:agents-mooring-agent", "list", "", "nodes", "", "", true},
		// pod IPAM is on in the custom set only.
		{"system:serviceaccount:mooring-custom:lb-agent", "update", "mooring.dev", "podipamnodes", "", "", true},
		// The mode is recorded in the controller's lease namespace (where
		// the controller writes it); the agents may only read it (by name:
		// TestImpersonatedServiceAccounts).
		{"system:serviceaccount:mooring-custom:lb-ipam", "create", "", "configmaps", "", "mooring-leases", true},
		{"system:serviceaccount:mooring-custom:lb-ipam", "create", "", "configmaps", "", "mooring-custom", false},
		{"system:serviceaccount:mooring-custom:lb-agent", "update", "", "configmaps", "", "mooring-leases", false},
		{"system:serviceaccount:mooring-custom:lb-agent", "patch", "", "nodes", "", "", false},
		{"system:serviceaccount:mooring-system:mooring-agent", "update", "mooring.dev", "podipamnodes", "", "", false},
		{"system:serviceaccount:mooring-agents:agents-mooring-agent", "list", "mooring.dev", "l2announcementpolicies", "", "", true},
	} {
		if got := can(t, env, c.sa, c.verb, c.group, c.resource, c.sub, c.ns); got != c.want {
			t.Errorf("%s %s %s/%s/%s in %q: allowed %v, want %v", c.sa, c.verb, c.group, c.resource, c.sub, c.ns, got, c.want)
		}
	}
}

// copyChart copies the chart to dir as an older version whose pool CRD
// lacks spec.priority: the "previous release" an upgrade starts from.
func copyChart(t *testing.T, dir, version string) string {
	t.Helper()
	src := filepath.Join(root(t), Dir)
	dst := filepath.Join(dir, "mooring")
	err := filepath.WalkDir(src, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if filepath.Base(p) == "Chart.yaml" {
			b = []byte(strings.ReplaceAll(string(b), "version: 0.1.0", "version: "+version))
		}
		if filepath.Base(p) == "mooring.dev_loadbalancerippools.yaml" {
			b = withoutPriority(t, b)
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func withoutPriority(t *testing.T, crd []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := yaml.Unmarshal(crd, &m); err != nil {
		t.Fatal(err)
	}
	for _, v := range m["spec"].(map[string]any)["versions"].([]any) {
		unstructured.RemoveNestedField(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "priority")
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func hasPriority(t *testing.T, dyn dynamic.Interface) bool {
	t.Helper()
	crd, err := dyn.Resource(crdGVR).Get(context.Background(), "loadbalancerippools.mooring.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range crd.Object["spec"].(map[string]any)["versions"].([]any) {
		if _, ok, _ := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "priority"); ok {
			return true
		}
	}
	return false
}

// helm upgrade from the previous chart version, whose CRD lacks a field,
// updates the CRD (the CRDs are templates of a subchart, not crds/).
func TestHelmUpgradeUpdatesCRDs(t *testing.T) {
	helmBin(t)
	bin, err := testenv.BinDir()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	// A bare control plane: no CRDs, so that Helm owns them from the start.
	env := &envtest.Environment{BinaryAssetsDirectory: bin}
	cfg, err := env.Start()
	if err != nil {
		_ = env.Stop()
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	kc, err := (&testenv.Env{Environment: env, Config: cfg}).KubeconfigFile(t.TempDir(), "helm")
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	old := copyChart(t, t.TempDir(), "0.0.1")
	common := []string{"--namespace", "mooring-system", "--kubeconfig", kc, "--set", "agent.gossipKey.value=" + testKey}
	if out, err := helm(t, append([]string{"install", "mooring", old, "--create-namespace"}, common...)...); err != nil {
		t.Fatalf("helm install (0.0.1): %v\n%s", err, out)
	}
	if hasPriority(t, dyn) {
		t.Fatal("the 0.0.1 chart's CRD should lack spec.priority")
	}
	if out, err := helm(t, append([]string{"upgrade", "mooring", Dir}, common...)...); err != nil {
		t.Fatalf("helm upgrade (0.1.0): %v\n%s", err, out)
	}
	if !hasPriority(t, dyn) {
		t.Error("helm upgrade did not update the CRD: spec.priority still missing")
	}
	out, err := helm(t, "list", "--namespace", "mooring-system", "--kubeconfig", kc, "-o", "json")
	if err != nil || !strings.Contains(out, `"chart":"mooring-0.1.0"`) || !strings.Contains(out, `"revision":"2"`) {
		t.Errorf("helm list after upgrade: %s %v", out, err)
	}
	// uninstall keeps the CRDs (helm.sh/resource-policy: keep).
	if out, err := helm(t, "uninstall", "mooring", "--namespace", "mooring-system", "--kubeconfig", kc); err != nil {
		t.Fatalf("helm uninstall: %v\n%s", err, out)
	}
	if _, err := dyn.Resource(crdGVR).Get(context.Background(), "loadbalancerippools.mooring.dev", metav1.GetOptions{}); apierrors.IsNotFound(err) {
		t.Error("helm uninstall deleted the CRDs despite crds.keep")
	}
}
