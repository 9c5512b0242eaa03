package lab

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/mooringlb/mooring/internal/lab/realnode"
)

// Real nodes (`lab up --runtime=containerd`): every node namespace runs a
// real containerd and a real kubelet (internal/lab/realnode) instead of
// the kubelet stand-in; docs/lab.md "Real nodes" says what the machine
// forces on them.
const (
	// RuntimeProcess is the kubelet stand-in (the default, see
	// docs/benchmarks.md for why); RuntimeContainerd real nodes.
	RuntimeProcess    = "process"
	RuntimeContainerd = "containerd"
	// EnvContainerd names hack/containerd/build.sh's folder; EnvImages the
	// folder with the images real nodes import (`make image labimages`:
	// dist/).
	EnvContainerd = "MOORING_CONTAINERD"
	EnvImages     = "MOORING_IMAGES"
	// MooringRepository is the chart's image repository; the archive of
	// `make image` is imported under it, tagged with its version.
	MooringRepository = "ghcr.io/mooringlb/mooring"
	// labImagePrefix names the lab's own images (echo, pause).
	labImagePrefix = "mooring.dev/lab/"
)

// The image archives Images must hold.
const (
	mooringArchive = "mooring.oci.tar"
	echoArchive    = "echo.oci.tar"
	pauseArchive   = "pause.oci.tar"
)

// realNodes says whether the nodes run containerd and a kubelet.
func (c *Config) realNodes() bool { return c.Runtime == RuntimeContainerd }

func (c *Config) validateRuntime() error {
	switch c.Runtime {
	case "", RuntimeProcess:
		return nil
	case RuntimeContainerd:
	default:
		return fmt.Errorf("lab: --runtime %q: use %q (the kubelet stand-in) or %q (real kubelet and containerd)", c.Runtime, RuntimeProcess, RuntimeContainerd)
	}
	if c.MetalLB != "" && c.Install != InstallChart {
		return errors.New("lab: --runtime=containerd with --metallb needs --install=chart: on real nodes Mooring's controller runs --adopt-only from the chart beside MetalLB installed from its own manifest")
	}
	if c.MetalLB != "" {
		if err := validateRealMetalLB(c.MetalLB); err != nil {
			return err
		}
	}
	if c.usesPodIPAM() && c.Install != InstallChart {
		return fmt.Errorf("lab: --runtime=containerd with --pod-ipam=%s needs --install=chart: on real nodes the chart's agents serve the addresses and its install-cni puts mooring-ipam in (lab processes cannot reach a node's private /run/mooring)", c.PodIPAM)
	}
	for _, b := range []string{"containerd", "containerd-shim-runc-v2", "ctr"} {
		if !isExecFile(filepath.Join(c.Containerd, b)) {
			return fmt.Errorf("lab: --runtime=containerd: %s not found in %q: run `hack/containerd/build.sh` and set %s to its last line (or pass --containerd)", b, c.Containerd, EnvContainerd)
		}
	}
	if !isExecFile(filepath.Join(c.KubeBin, "kubelet")) {
		return fmt.Errorf("lab: --runtime=containerd: no kubelet in %q: run `make kubebin` (it builds the kubelet since the real nodes came)", c.KubeBin)
	}
	if !isExecFile(c.Runc) {
		return fmt.Errorf("lab: --runtime=containerd: runc not found at %q: run `make deps` (Debian's runc)", c.Runc)
	}
	for _, t := range []string{"nsenter", "unshare"} {
		if _, err := exec.LookPath(t); err != nil {
			return fmt.Errorf("lab: --runtime=containerd needs %s (Debian's util-linux): %w", t, err)
		}
	}
	need := []string{echoArchive, pauseArchive}
	if c.Install == InstallChart {
		need = append(need, mooringArchive)
	}
	for _, a := range need {
		if _, err := imageRef(filepath.Join(c.Images, a)); err != nil {
			return fmt.Errorf("lab: --runtime=containerd: %w: run `make image labimages` and pass dist/ as --images (or set %s)", err, EnvImages)
		}
	}
	if !isExecFile(filepath.Join(c.CNIPlugins, "bridge")) || !isExecFile(filepath.Join(c.CNIPlugins, "host-local")) {
		return fmt.Errorf("lab: --runtime=containerd needs the reference CNI plugins in %q: run hack/cniplugins/build.sh and set %s to its last line (or pass --cni-plugins)", c.CNIPlugins, EnvCNIPlugins)
	}
	return nil
}

// imageRef reads the name an OCI archive of hack/image gives its index
// (org.opencontainers.image.ref.name in index.json: the version).
func imageRef(archive string) (string, error) {
	f, err := os.Open(archive)
	if err != nil {
		return "", fmt.Errorf("image archive %s: %w", archive, err)
	}
	defer f.Close()
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err != nil {
			return "", fmt.Errorf("image archive %s has no index.json: %w", archive, err)
		}
		if h.Name != "index.json" {
			continue
		}
		var idx struct {
			Manifests []struct {
				Annotations map[string]string `json:"annotations"`
			} `json:"manifests"`
		}
		if err := json.NewDecoder(io.LimitReader(tr, 1<<20)).Decode(&idx); err != nil {
			return "", fmt.Errorf("image archive %s: index.json: %w", archive, err)
		}
		for _, m := range idx.Manifests {
			if r := m.Annotations["org.opencontainers.image.ref.name"]; r != "" && !strings.ContainsAny(r, "/:@") {
				return r, nil
			}
		}
		return "", fmt.Errorf("image archive %s names no tag (org.opencontainers.image.ref.name)", archive)
	}
}

// labImage is one archive a real node imports and the name it gets.
type labImage struct {
	Archive, Repository, Tag string
}

// Ref is the image's name in containerd.
func (i labImage) Ref() string { return i.Repository + ":" + i.Tag }

// labImages are the archives the real nodes import.
func (c *Config) labImages() ([]labImage, error) {
	imgs := []labImage{
		{Archive: filepath.Join(c.Images, pauseArchive), Repository: labImagePrefix + "pause"},
		{Archive: filepath.Join(c.Images, echoArchive), Repository: labImagePrefix + "echo"},
	}
	if c.Install == InstallChart {
		imgs = append(imgs, labImage{Archive: filepath.Join(c.Images, mooringArchive), Repository: MooringRepository})
	}
	if c.realMetalLB() {
		imgs = append(imgs, metallbImages(c.MetalLB)...)
	}
	for i := range imgs {
		t, err := imageRef(imgs[i].Archive)
		if err != nil {
			return nil, err
		}
		imgs[i].Tag = t
	}
	return imgs, nil
}

// realNodeAPIServerArgs adapt the apiserver to real kubelets: they
// authenticate with client certificates (system:node:<name>) and are
// authorized by the Node authorizer and NodeRestriction, the apiserver
// reaches them for logs and exec with its own client certificate, and pods
// get ServiceAccount tokens (the stand-in needs none; the chart's pods use
// them).
func realNodeAPIServerArgs(args []string, k *pki) []string {
	out := slices.DeleteFunc(slices.Clone(args), func(a string) bool {
		return a == "--disable-admission-plugins=ServiceAccount" || strings.HasPrefix(a, "--authorization-mode=")
	})
	return append(out,
		"--authorization-mode=Node,RBAC",
		"--enable-admission-plugins=NodeRestriction",
		"--client-ca-file="+k.CACert,
		"--kubelet-client-certificate="+k.kubeletClientCert(),
		"--kubelet-client-key="+k.kubeletClientKey(),
		"--kubelet-preferred-address-types=InternalIP",
		// Webhooks (MetalLB's) are called at their endpoints' pod
		// addresses, which the control plane routes to: it runs no
		// kube-proxy for Service addresses.
		"--enable-aggregator-routing=true",
	)
}

// realNodeKCMControllers are the controllers pods on real kubelets need:
// every namespace's default ServiceAccount and its kube-root-ca.crt (the
// projected token volume mounts it).
const realNodeKCMControllers = ",serviceaccount-controller,root-ca-cert-publisher,garbage-collector-controller"

// realNodePlan is node n's plan for the real runtime: its folder under
// the lab's, its cgroup parent below cgroupTop, the binaries of c and the
// lab's CA (k).
func realNodePlan(c *Config, p paths, k *pki, cgroupTop string, n nodeSpec, sandbox string) *realnode.Node {
	dir := filepath.Join(p.Dir, "nodes", n.Name)
	rn := &realnode.Node{
		Name: n.Name, Addrs: n.Addrs, Labels: kubeletLabels(n.Labels), PodCIDRs: n.PodCIDRs, Dir: dir,
		CgroupParent: cgroupTop + "/" + n.Name,
		CACert:       k.CACert, Kubeconfig: filepath.Join(dir, "kubeconfig"),
		Containerd: c.Containerd, Runc: c.Runc, Kubelet: filepath.Join(c.KubeBin, "kubelet"),
		CNIPlugins: c.CNIPlugins, SandboxImage: sandbox,
	}
	// Pod IPAM: the chart's install-cni writes the node's network and
	// puts mooring-ipam in (agent.cni.network, podIPAMChartArgs).
	rn.CNIFromChart = c.usesPodIPAM()
	return rn
}

// labCgroupTop is the lab's own cgroup (/mooring-lab-<pid>): every node's
// cgroup parent is below it.
func labCgroupTop() string { return fmt.Sprintf("/%s%d", labCgroupPrefix, os.Getpid()) }

// labCgroupPrefix names the labs' cgroups: /mooring-lab-<pid of lab up>.
const labCgroupPrefix = "mooring-lab-"

// realNodeKCMArgs give the root-ca-cert-publisher the lab's CA.
func realNodeKCMArgs(c *Config, p paths) []string {
	if !c.realNodes() {
		return nil
	}
	return []string{"--root-ca-file=" + filepath.Join(p.PKI, "ca.crt")}
}

// FindContainerd returns $MOORING_CONTAINERD, else the current
// hack/containerd build under ${XDG_CACHE_HOME:-~/.cache}/mooring/containerd;
// "" when neither has containerd.
func FindContainerd() string {
	if d := os.Getenv(EnvContainerd); d != "" {
		return d
	}
	if d, err := os.UserCacheDir(); err == nil {
		if p := filepath.Join(d, "mooring", "containerd", "current"); isExecFile(filepath.Join(p, "containerd")) {
			return p
		}
	}
	return ""
}

// FindImages returns $MOORING_IMAGES, else <repo>/dist.
func FindImages(self string) string {
	if d := os.Getenv(EnvImages); d != "" {
		return d
	}
	return findInRepo(self, "dist")
}

// FindRunc returns runc on $PATH or Debian's /usr/sbin/runc.
func FindRunc() string {
	if p, err := exec.LookPath("runc"); err == nil {
		return p
	}
	return "/usr/sbin/runc"
}

// realNodeChartArgs point helm's rendering at the imported Mooring image,
// as a user who pushed `make image`'s archive sets image.repository and
// image.tag (docs/install.md), instead of the stand-in's marker.
func realNodeChartArgs(args []string, imgs []labImage) []string {
	out := slices.Clone(args)
	for _, img := range imgs {
		if img.Repository != MooringRepository {
			continue
		}
		for i, a := range out {
			if strings.HasPrefix(a, "image.repository=") {
				out[i] = "image.repository=" + img.Repository
			}
		}
		// --set-string: a tag of digits only (`git describe --always`
		// of a commit whose short hash has no letter) is a number to
		// --set, which the chart's schema refuses (and 0123456 would
		// lose its 0).
		out = append(out, "--set-string", "image.tag="+img.Tag)
	}
	return out
}

// kubeletMaySet says whether NodeRestriction lets a kubelet set label k
// on its own Node (docs: kubernetes.io/k8s.io labels only from an allowed
// list).
func kubeletMaySet(k string) bool {
	prefix, _, ok := strings.Cut(k, "/")
	if !ok {
		return true
	}
	return !(prefix == "kubernetes.io" || strings.HasSuffix(prefix, ".kubernetes.io") || prefix == "k8s.io" || strings.HasSuffix(prefix, ".k8s.io"))
}

// kubeletLabels are the labels a real kubelet registers with.
func kubeletLabels(l map[string]string) map[string]string {
	out := maps.Clone(l)
	maps.DeleteFunc(out, func(k, _ string) bool { return !kubeletMaySet(k) })
	return out
}
