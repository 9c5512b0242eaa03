package lab

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// Chart install (`lab up --install=chart`): the lab renders the
// repository's chart with Helm, applies it server-side as a user's
// `helm template | kubectl apply --server-side` would, and the kubelet
// stand-ins run its Deployment's and DaemonSet's pods with the lab's
// mooring binary (kubelet.MooringImage marks them). kube-controller-manager
// then also runs the deployment, replicaset and daemonset controllers, and
// kube-scheduler places the pods.

// ChartRelease and ChartNamespace are the release the lab installs.
const (
	ChartRelease   = "mooring"
	ChartNamespace = mooringNamespace
)

// mooringProcesses says whether the lab itself runs the controller and the
// agents (without --install=chart).
func (c *Config) mooringProcesses() bool { return c.Mooring && c.Install != InstallChart }

// validateInstallFlags checks --install and the flags it cannot go with.
func (c *Config) validateInstallFlags() error {
	switch c.Install {
	case "":
		return nil
	case InstallChart:
	default:
		return fmt.Errorf("lab: --install %q: use %q (or leave it out for lab processes)", c.Install, InstallChart)
	}
	switch {
	case !c.Mooring:
		return errors.New("lab: --install=chart installs Mooring: it cannot go with --no-mooring")
	case c.MetalLB != "" && !c.realNodes():
		return errors.New("lab: --install=chart with --metallb needs --runtime=containerd (MetalLB then runs from its own manifest), or leave out --install=chart for MetalLB and Mooring as lab processes")
	case c.usesPodIPAM() && !c.realNodes():
		return fmt.Errorf("lab: --install=chart with --pod-ipam=%s needs --runtime=containerd: the kubelet stand-in sets pods up itself, the chart's install-cni is for a real container runtime", c.PodIPAM)
	}
	return nil
}

// validateInstall checks what --install=chart needs on this machine.
func (c *Config) validateInstall() error {
	if c.Install != InstallChart {
		return nil
	}
	switch {
	case !isExecFile(c.Helm):
		return fmt.Errorf("lab: --install=chart needs helm, not found at %q: run `make helm` and set %s to its last line (or pass --helm)", c.Helm, EnvHelm)
	}
	if _, err := os.Stat(filepath.Join(c.ChartDir, "Chart.yaml")); err != nil {
		return fmt.Errorf("lab: no chart in %q: pass --chart <repo>/charts/mooring", c.ChartDir)
	}
	if !isExecFile(filepath.Join(c.KubeBin, "kube-scheduler")) {
		return fmt.Errorf("lab: --install=chart needs kube-scheduler in %q (the chart's pods are scheduled): run `make kubebin`", c.KubeBin)
	}
	return nil
}

// installName says how Mooring runs in the lab, for progress lines.
func installName(c Config) string {
	switch {
	case !c.Mooring:
		return "no Mooring"
	case c.Install == InstallChart:
		return "Helm chart"
	}
	return "lab processes"
}

// chartKubeletArgs are the kubelet stand-in's flags for running the
// chart's pods.
func chartKubeletArgs(c *Config, p paths) []string {
	if c.Install != InstallChart {
		return nil
	}
	args := []string{"--mooring-image=" + kubelet.MooringImage, "--pods-dir=" + filepath.Join(p.Dir, "pods")}
	for _, e := range c.SelfEnv {
		args = append(args, "--pod-env="+e)
	}
	return args
}

// FindHelm returns $MOORING_HELM/helm, else the current `make helm` build
// under ${XDG_CACHE_HOME:-~/.cache}/mooring/helm, else helm on $PATH; ""
// when there is none.
func FindHelm() string {
	if d := os.Getenv(EnvHelm); d != "" {
		return filepath.Join(d, "helm")
	}
	if d, err := os.UserCacheDir(); err == nil {
		if p := filepath.Join(d, "mooring", "helm", "current", "helm"); isExecFile(p) {
			return p
		}
	}
	if p, err := exec.LookPath("helm"); err == nil {
		return p
	}
	return ""
}

// FindChartDir returns <repo>/charts/mooring (see FindCRDDir).
func FindChartDir(self string) string {
	return findInRepo(self, filepath.Join("charts", "mooring"))
}

// helmTemplateArgs are the arguments of `helm template` for the lab: the
// chart's defaults and what docs/install.md tells a user to set (a gossip
// key: the chart refuses to run gossip without one), and the image (the
// lab's marker, never pulled: its kubelet stand-ins run this binary).
// Nothing else: the lab measures what a default install runs.
func helmTemplateArgs(chartDir, gossipKey string) []string {
	return []string{"template", ChartRelease, chartDir,
		"--namespace", ChartNamespace,
		"--set", "image.repository=" + kubelet.MooringImage,
		"--set", "agent.gossipKey.value=" + gossipKey,
	}
}

// newGossipKey is base64 of 32 random bytes, as values.yaml suggests.
func newGossipKey() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(b), nil
}

// decodeManifests splits helm's output into objects, dropping empty
// documents.
func decodeManifests(b []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, fmt.Errorf("lab: reading the rendered chart: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		u := &unstructured.Unstructured{Object: m}
		if u.GetKind() == "" || u.GetName() == "" {
			return nil, fmt.Errorf("lab: the rendered chart holds an object without kind or name: %v", m)
		}
		out = append(out, u)
	}
}

// applyRank sorts the objects so that what others refer to goes first:
// CRDs, namespaces, ServiceAccounts, Secrets and RBAC, then the rest, the
// workloads last.
func applyRank(u *unstructured.Unstructured) int {
	switch u.GetKind() {
	case "CustomResourceDefinition", "Namespace":
		return 0
	case "ServiceAccount", "Secret", "ConfigMap", "ClusterRole", "Role", "ClusterRoleBinding", "RoleBinding", "PriorityClass":
		return 1
	case "Deployment", "DaemonSet", "StatefulSet":
		return 3
	}
	return 2
}

// ChartTemplateArgs are the `helm template` arguments `lab up
// --install=chart` renders chartDir with (gossipKey as the key).
func ChartTemplateArgs(chartDir, gossipKey string) []string {
	return helmTemplateArgs(chartDir, gossipKey)
}
