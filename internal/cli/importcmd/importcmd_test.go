package importcmd

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/importer"
	"github.com/mooringlb/mooring/internal/testenv"
)

const fixtures = "../../importer/testdata"

func TestImportFilesAndDirectories(t *testing.T) {
	inputs, err := ReadFiles([]string{filepath.Join(fixtures, "metallb"), filepath.Join(fixtures, "cilium", "pools.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	n := len(inputs)
	if n < 5 || inputs[n-1].Name != filepath.Join(fixtures, "cilium", "pools.yaml") {
		t.Fatalf("read %d files, want every fixture of the directory, then the file", n)
	}
	dir := t.TempDir()
	var out, errOut bytes.Buffer
	o := Options{Output: "json", ReportFile: filepath.Join(dir, "report.json")}
	if err := Run(o, inputs[:n-1], importer.MetalLB, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var list struct {
		Kind  string
		Items []struct {
			Kind     string
			Metadata struct{ Name string }
		}
	}
	if err := json.Unmarshal(out.Bytes(), &list); err != nil || list.Kind != "List" || len(list.Items) == 0 {
		t.Fatalf("-o json: %v %+v", err, list)
	}
	var rep importer.Report
	b, _ := os.ReadFile(o.ReportFile)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Count(importer.NotMapped) == 0 {
		t.Fatalf("report file: %v, %d not-mapped entries", err, rep.Count(importer.NotMapped))
	}
	if !strings.Contains(errOut.String(), "not mapped; written to") {
		t.Errorf("stderr: %q", errOut.String())
	}
	out.Reset()
	errOut.Reset()
	if err := Run(Options{Output: "yaml"}, inputs[n-1:], importer.Cilium, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(out.String(), "kind: LoadBalancerIPPool"); n != 5 {
		t.Errorf("yaml: %d pools, want 5:\n%s", n, out.String())
	}
	if !strings.Contains(errOut.String(), "summary:") {
		t.Errorf("report on stderr missing: %q", errOut.String())
	}
	if err := Run(Options{Output: "xml"}, inputs[n-1:], importer.Cilium, &out, &errOut); err == nil {
		t.Error("-o xml accepted")
	}
}

// crd installs a minimal CustomResourceDefinition of our own for another
// system's kind (schema open), so the real apiserver serves it.
func crd(t *testing.T, dc dynamic.Interface, group, kind, plural string, namespaced bool, versions ...string) {
	t.Helper()
	scope := "Cluster"
	if namespaced {
		scope = "Namespaced"
	}
	var vs []any
	for i, v := range versions {
		vs = append(vs, map[string]any{"name": v, "served": true, "storage": i == 0,
			"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": plural + "." + group},
		"spec": map[string]any{"group": group, "scope": scope, "versions": vs,
			"names": map[string]any{"kind": kind, "plural": plural, "listKind": kind + "List", "singular": strings.ToLower(kind)}},
	}}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	if _, err := dc.Resource(gvr).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Wait until the new resource is served.
	res := schema.GroupVersionResource{Group: group, Version: versions[0], Resource: plural}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := dc.Resource(res).List(context.Background(), metav1.ListOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s never served: %v", plural, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createFixture creates every object of a fixture file in the apiserver.
func createFixture(t *testing.T, dc dynamic.Interface, path string, resources map[string]schema.GroupVersionResource) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range strings.Split(string(data), "\n---") {
		var m map[string]any
		if err := yaml.Unmarshal([]byte(doc), &m); err != nil || m == nil {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		gvr, ok := resources[u.GetKind()]
		if !ok {
			continue
		}
		gvr.Version = strings.TrimPrefix(u.GetAPIVersion(), gvr.Group+"/")
		var ri dynamic.ResourceInterface = dc.Resource(gvr)
		if u.GetNamespace() != "" {
			ri = dc.Resource(gvr).Namespace(u.GetNamespace())
		}
		if _, err := ri.Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// --from-cluster reads the same objects from a real apiserver as -f reads
// from the files, and imports them to the same pools and policies.
func TestImportFromCluster(t *testing.T) {
	env := testenv.StartT(t)
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	crd(t, dc, "metallb.io", "IPAddressPool", "ipaddresspools", true, "v1beta1")
	crd(t, dc, "metallb.io", "L2Advertisement", "l2advertisements", true, "v1beta1")
	crd(t, dc, "metallb.io", "BGPPeer", "bgppeers", true, "v1beta2")
	crd(t, dc, "cilium.io", "CiliumLoadBalancerIPPool", "ciliumloadbalancerippools", false, "v2", "v2alpha1")
	ctx := context.Background()
	for _, ns := range []string{"metallb-system"} {
		if _, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Create(ctx,
			&unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}}},
			metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	kinds := map[string]schema.GroupVersionResource{
		"IPAddressPool":            {Group: "metallb.io", Resource: "ipaddresspools"},
		"L2Advertisement":          {Group: "metallb.io", Resource: "l2advertisements"},
		"BGPPeer":                  {Group: "metallb.io", Resource: "bgppeers"},
		"ConfigMap":                {Resource: "configmaps"},
		"CiliumLoadBalancerIPPool": {Group: "cilium.io", Resource: "ciliumloadbalancerippools"},
	}
	createFixture(t, dc, filepath.Join(fixtures, "metallb", "ipaddresspools.yaml"), kinds)
	createFixture(t, dc, filepath.Join(fixtures, "metallb", "legacy-configmap.yaml"), kinds)
	createFixture(t, dc, filepath.Join(fixtures, "cilium", "pools.yaml"), kinds)

	for _, tc := range []struct {
		system string
		files  []string
		imp    func([]importer.Input) (*importer.Result, error)
		skip   string // a kind the test's cluster does not serve
	}{
		{"metallb", []string{"metallb/ipaddresspools.yaml", "metallb/legacy-configmap.yaml"}, importer.MetalLB, "Community"},
		{"cilium", []string{"cilium/pools.yaml"}, importer.Cilium, ""},
	} {
		inputs, err := ReadCluster(ctx, dc, tc.system, "metallb-system")
		if err != nil {
			t.Fatal(err)
		}
		got, err := tc.imp(inputs)
		if err != nil {
			t.Fatal(err)
		}
		var paths []string
		for _, f := range tc.files {
			paths = append(paths, filepath.Join(fixtures, f))
		}
		files, err := ReadFiles(paths)
		if err != nil {
			t.Fatal(err)
		}
		want, err := tc.imp(files)
		if err != nil {
			t.Fatal(err)
		}
		if g, w := specs(t, got), specs(t, want); g != w {
			t.Errorf("%s: from the cluster:\n%s\nfrom the files:\n%s", tc.system, g, w)
		}
	}
	checkBGPAdmitted(t, dc)
}

// checkBGPAdmitted creates every BGP object imported from the fixture
// with every MetalLB BGP field on the same apiserver: Mooring's CRDs (their
// CEL rules included) admit all of them.
func checkBGPAdmitted(t *testing.T, dc dynamic.Interface) {
	t.Helper()
	files, err := ReadFiles([]string{filepath.Join(fixtures, "metallb", "bgp-every-field.yaml")})
	if err != nil {
		t.Fatal(err)
	}
	res, err := importer.MetalLB(files)
	if err != nil {
		t.Fatal(err)
	}
	resources := map[string]string{"BGPPeer": "bgppeers", "BGPAdvertisement": "bgpadvertisements",
		"BGPCommunity": "bgpcommunities", "BFDProfile": "bfdprofiles", "LoadBalancerIPPool": "loadbalancerippools"}
	n := 0
	for _, o := range res.Objects() {
		b, err := json.Marshal(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			t.Fatal(err)
		}
		r, ok := resources[u.GetKind()]
		if !ok {
			continue
		}
		gvr := schema.GroupVersionResource{Group: "mooring.dev", Version: "v1alpha1", Resource: r}
		if _, err := dc.Resource(gvr).Create(context.Background(), u, metav1.CreateOptions{}); err != nil {
			t.Errorf("imported %s %s refused by the apiserver: %v", u.GetKind(), u.GetName(), err)
		}
		n++
	}
	if n < 10 {
		t.Errorf("only %d imported objects created", n)
	}
}

// specs renders pools and policies without the imported-from annotation,
// sorted by name, for comparison.
func specs(t *testing.T, r *importer.Result) string {
	t.Helper()
	m := map[string]any{}
	for _, p := range r.Pools {
		m["pool/"+p.Metadata.Name] = p.Spec
	}
	for _, p := range r.Policies {
		m["policy/"+p.Metadata.Name] = p.Spec
	}
	b, err := yaml.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
