package lab

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// --install=chart needs Mooring, helm, the chart and kube-scheduler, and
// names the fix for each.
func TestValidateInstall(t *testing.T) {
	dir := t.TempDir()
	kb, crds, chart := filepath.Join(dir, "kb"), filepath.Join(dir, "crd"), filepath.Join(dir, "chart")
	for _, d := range []string{kb, crds, chart} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range append(slices.Clone(kubeBinaries), "kube-scheduler", "helm") {
		if err := os.WriteFile(filepath.Join(kb, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(crds, "x.yaml"), filepath.Join(chart, "Chart.yaml")} {
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := Config{Nodes: 3, StateDir: "/run/x", KubeBin: kb, CRDDir: crds, Self: "/bin/true", Mooring: true,
		Install: InstallChart, Helm: filepath.Join(kb, "helm"), ChartDir: chart,
		NodeMonitorGracePeriod: 20 * time.Second, Timeout: time.Minute, Log: slog.Default()}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, c := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"unknown install": {func(c *Config) { c.Install = "kustomize" }, `"chart"`},
		"no mooring":      {func(c *Config) { c.Mooring = false }, "--no-mooring"},
		"no helm":         {func(c *Config) { c.Helm = filepath.Join(dir, "nohelm") }, "make helm"},
		"no chart":        {func(c *Config) { c.ChartDir = dir }, "--chart"},
		"no scheduler":    {func(c *Config) { os.Remove(filepath.Join(kb, "kube-scheduler")) }, "kube-scheduler"},
		"pod IPAM":        {func(c *Config) { c.PodIPAM = PodIPAMMultiPool }, "--pod-ipam"},
	} {
		cfg := good
		c.mut(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: Validate = %v, want an error naming %s", name, err, c.want)
		}
	}
}

// With the chart the lab runs no Mooring processes of its own; kcm makes
// the pods of Deployments and DaemonSets and the kubelets run Mooring's.
// Without it, nothing changes.
func TestChartComponents(t *testing.T) {
	p := newPaths("/run/lab")
	n := nodeSpec{Name: "node-1"}
	plain := Config{Mooring: true, Self: "/bin/mooring", SelfEnv: []string{"X=1"}}
	chart := plain
	chart.Install = InstallChart
	if !plain.mooringProcesses() || chart.mooringProcesses() {
		t.Error("mooringProcesses: lab processes only without the chart")
	}
	if got := kcmComponent(&plain, p).Args; slices.ContainsFunc(got, func(a string) bool { return strings.Contains(a, "deployment-controller") }) {
		t.Errorf("default controllers changed: %q", got)
	}
	ctl := strings.Join(kcmComponent(&chart, p).Args, " ")
	for _, want := range []string{"endpointslice-controller", "deployment-controller", "replicaset-controller", "daemonset-controller"} {
		if !strings.Contains(ctl, want) {
			t.Errorf("chart kcm args %s lack %s", ctl, want)
		}
	}
	if args := kubeletComponent(&plain, p, n).Args; slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--mooring-image") }) {
		t.Errorf("default kubelet runs Mooring pods: %q", args)
	}
	args := kubeletComponent(&chart, p, n).Args
	for _, want := range []string{"--mooring-image=" + kubelet.MooringImage, "--pods-dir=/run/lab/pods", "--pod-env=X=1"} {
		if !slices.Contains(args, want) {
			t.Errorf("chart kubelet args %q lack %s", args, want)
		}
	}
	targs := helmTemplateArgs("/repo/charts/mooring", "KEY")
	if !slices.Contains(targs, "image.repository="+kubelet.MooringImage) || !slices.Contains(targs, "agent.gossipKey.value=KEY") ||
		!slices.Contains(targs, ChartNamespace) || slices.ContainsFunc(targs, func(a string) bool { return strings.HasPrefix(a, "agent.flags.") }) {
		t.Errorf("helm template args %q", targs)
	}
	if k1, _ := newGossipKey(); len(k1) != 44 {
		t.Errorf("gossip key %q is not base64 of 32 bytes", k1)
	}
}

func TestDecodeManifests(t *testing.T) {
	in := "---\n# Source: x\n---\napiVersion: apps/v1\nkind: DaemonSet\nmetadata:\n  name: a\n---\napiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: b\n---\napiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: c\n"
	objs, err := decodeManifests([]byte(in))
	if err != nil || len(objs) != 3 {
		t.Fatalf("%d objects, %v", len(objs), err)
	}
	slices.SortStableFunc(objs, func(a, b *unstructured.Unstructured) int { return applyRank(a) - applyRank(b) })
	if objs[0].GetKind() != "CustomResourceDefinition" || objs[2].GetKind() != "DaemonSet" {
		t.Errorf("apply order %s, %s, %s", objs[0].GetKind(), objs[1].GetKind(), objs[2].GetKind())
	}
	if _, err := decodeManifests([]byte("kind: X\n")); err == nil {
		t.Error("an object without a name was accepted")
	}
}
