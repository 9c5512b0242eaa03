package lab

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

// Defaults for `mooring lab up`.
const (
	// DefaultNodes is how many node namespaces the lab has: the seed's kind
	// lab had two workers; a third node lets a failover have somewhere to go
	// while one backend node is dead.
	DefaultNodes = 3
	// DefaultNodeMonitorGracePeriod shortens Kubernetes' 50 s so that phase 2
	// of a failover (the dead node's endpoints leaving the EndpointSlice)
	// fits in a test; pass 50s to reproduce a stock cluster.
	DefaultNodeMonitorGracePeriod = 20 * time.Second
	// DefaultTimeout bounds `lab up` until ready.
	DefaultTimeout = 90 * time.Second
	// EnvStateDir overrides DefaultStateDir.
	EnvStateDir = "MOORING_LAB_DIR"
	// EnvHelm names the folder holding helm (`make helm`'s last line), used
	// by --install=chart.
	EnvHelm = "MOORING_HELM"
	// InstallChart is Config.Install for Mooring installed from its Helm
	// chart (see installChart).
	InstallChart = "chart"
	// EnvKubeBin names the folder with etcd, kube-apiserver,
	// kube-controller-manager and kube-proxy (set by `make demo`/`make test`).
	EnvKubeBin = "MOORING_KUBEBIN"
)

// DefaultStateDir is where a running lab keeps its state, certificates,
// logs and etcd data. It is on tmpfs and root's, as the lab is.
const DefaultStateDir = "/run/mooring-lab"

// Addressing of the lab (see docs/lab.md). The lab link is netlab's
// 10.213.0.0/24 + fd00:213::/64; the control plane sits at offset 2.
// The variables are fixed; they are not constants only because netip
// values cannot be.
const ControlPlaneOffset = 2 // the control-plane namespace is 10.213.0.2

var (
	// ClusterCIDR4 and ClusterCIDR6 hold every node's pod CIDR: node-i gets
	// 10.244.i.0/24 and fd00:244:0:i::/64.
	ClusterCIDR4 = netip.MustParsePrefix("10.244.0.0/16")
	ClusterCIDR6 = netip.MustParsePrefix("fd00:244::/56")
	// ServiceCIDR4 and ServiceCIDR6 are the ClusterIP ranges.
	ServiceCIDR4 = netip.MustParsePrefix("10.96.0.0/16")
	ServiceCIDR6 = netip.MustParsePrefix("fd00:96::/112")
	// PoolRange4 and PoolRange6 are the demo LoadBalancerIPPool: offsets
	// 100-199 of the lab link for IPv4 (netlab leaves them free), and
	// ::100-::1ff for IPv6, above every host offset (< 256).
	PoolRange4 = [2]netip.Addr{netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("10.213.0.199")}
	PoolRange6 = [2]netip.Addr{netip.MustParseAddr("fd00:213::100"), netip.MustParseAddr("fd00:213::1ff")}
)

// APIServerPort is the apiserver's port inside the control-plane namespace.
const APIServerPort = 6443

// Config is everything Run needs; the CLI fills it from flags.
type Config struct {
	// Nodes is the number of node namespaces (1..netlab.MaxNodes); the demo
	// Service needs 2 for one pod per node.
	Nodes int
	// StateDir holds the running lab's files; it must not exist or hold a
	// dead lab's leftovers, and is removed on the way out.
	StateDir string
	// KubeBin is the folder with etcd, kube-apiserver,
	// kube-controller-manager and kube-proxy.
	KubeBin string
	// CRDDir holds Mooring's CRD manifests (config/crd).
	CRDDir string
	// Self is the mooring executable, run as the kubelet stand-in, the echo
	// pods, the controller and the agents. SelfEnv is added to their
	// environment (tests use it to run a test binary as mooring).
	Self    string
	SelfEnv []string
	// Mooring runs the Mooring controller and one agent per node; without it
	// the Service gets no address and the lab stops at ClusterIP.
	Mooring bool
	// Install says how Mooring gets into the lab: "" runs the controller
	// and agents as lab processes; InstallChart renders ChartDir with Helm
	// (the binary at Helm), applies it server-side, and the kubelet
	// stand-ins run the chart's pods with Self.
	Install  string
	Helm     string
	ChartDir string
	// MetalLB, when set, is the folder hack/metallb/build.sh printed: the
	// lab runs MetalLB's controller and speakers (metallb.go), MetalLB
	// serves the demo Service, and with Mooring too the Mooring controller
	// runs with --adopt-only and no Mooring pool or policy is created (what
	// a cluster looks like before `mooring migrate metallb run`).
	MetalLB string
	// NodeMonitorGracePeriod is kube-controller-manager's
	// --node-monitor-grace-period.
	NodeMonitorGracePeriod time.Duration
	// Timeout bounds the time until the lab is ready.
	Timeout time.Duration
	// PodIPAM is the pod IPAM mode (see podipam.go): "" or "off" keeps the
	// stand-in's static pod addresses; kubernetes, cluster-pool or
	// multi-pool wire pods through libcni with mooring-ipam. PodNetwork is
	// the main CNI plugin, bridge (default) or ptp; CNIPlugins the folder
	// of the reference plugins, IPAMPlugin the mooring-ipam executable.
	PodIPAM, PodNetwork    string
	CNIPlugins, IPAMPlugin string
	// Runtime runs the nodes (containerd.go): "" or RuntimeProcess the
	// kubelet stand-in, RuntimeContainerd a real containerd and kubelet per
	// node. Containerd is hack/containerd's folder, Runc the runc binary,
	// Images the folder with the image archives the real nodes import.
	Runtime, Containerd, Runc, Images string
	// BGP builds the BGP lab (bgp.go): a router on the segment, the client
	// behind it.
	BGP BGPConfig
	// KeepLogs, when set, is a folder to copy the components' logs into on
	// the way out; everything else is removed.
	KeepLogs string
	// Fault, when set, is injected once the lab is ready, before Run calls
	// its ready function; a fault that cannot be injected fails Run.
	Fault Fault
	// Log receives the lab's progress. Required.
	Log *slog.Logger
}

// ValidateFlags reports the first setting that no machine could run: a
// mistake in the command line (`lab up` exits 2 with it), found before
// anything is built or looked for. MetalLB and the tool paths only need
// to be non-empty when their flags are given.
func (c *Config) ValidateFlags() error {
	switch {
	case c.Nodes < 2 || c.Nodes > netlab.MaxNodes:
		return fmt.Errorf("lab: --nodes %d: use 2..%d (the demo Service has one pod on each of two nodes)", c.Nodes, netlab.MaxNodes)
	case c.NodeMonitorGracePeriod < 2*time.Second:
		return fmt.Errorf("lab: --node-monitor-grace-period %s: use 2s or more", c.NodeMonitorGracePeriod)
	case c.Timeout <= 0:
		return errors.New("lab: --timeout must be positive")
	}
	if err := c.validateInstallFlags(); err != nil {
		return err
	}
	if err := c.validatePodIPAMFlags(); err != nil {
		return err
	}
	return c.Fault.Validate(c)
}

// Validate reports the first unusable setting, naming the fix: the flags
// (ValidateFlags), then what the lab needs on this machine.
func (c *Config) Validate() error {
	if err := c.ValidateFlags(); err != nil {
		return err
	}
	switch {
	case c.Log == nil:
		return errors.New("lab: no logger")
	case c.StateDir == "" || !filepath.IsAbs(c.StateDir):
		return fmt.Errorf("lab: state dir %q must be an absolute path", c.StateDir)
	case c.Self == "":
		return errors.New("lab: no path to the mooring executable")
	}
	if err := c.validateInstall(); err != nil {
		return err
	}
	for _, b := range kubeBinaries {
		if _, err := os.Stat(filepath.Join(c.KubeBin, b)); err != nil {
			return fmt.Errorf("lab: %s not found in %q: run `make kubebin` and pass its last line as --kubebin (or set %s)", b, c.KubeBin, EnvKubeBin)
		}
	}
	if c.MetalLB != "" {
		if err := validateMetalLB(c.MetalLB); err != nil {
			return err
		}
	}
	if err := c.validateBGP(); err != nil {
		return err
	}
	if m, _ := filepath.Glob(filepath.Join(c.CRDDir, "*.yaml")); len(m) == 0 {
		return fmt.Errorf("lab: no CRD manifests in %q: pass --crds <repo>/config/crd", c.CRDDir)
	}
	if err := c.validateRuntime(); err != nil {
		return err
	}
	return c.validatePodIPAM()
}

// kubeBinaries are the programs the lab runs from KubeBin.
var kubeBinaries = []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-proxy"}

// StateDirFromEnv is $MOORING_LAB_DIR, else DefaultStateDir.
func StateDirFromEnv() string {
	if d := os.Getenv(EnvStateDir); d != "" {
		return d
	}
	return DefaultStateDir
}

// EnvKubeBinCache overrides the folder hack/kubebin/build.sh builds into.
const EnvKubeBinCache = "MOORING_KUBEBIN_CACHE"

// KubeBinCache is the folder hack/kubebin/build.sh builds into: one
// subfolder per key and a `current` link to the newest. It is per user
// ($MOORING_KUBEBIN_CACHE, else ${XDG_CACHE_HOME:-$HOME/.cache}/mooring/kubebin),
// so every clone of the repository shares one build.
func KubeBinCache() string {
	if d := os.Getenv(EnvKubeBinCache); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "mooring", "kubebin")
}

// FindKubeBin returns $MOORING_KUBEBIN, else KubeBinCache()/current when it
// holds kube-apiserver; "" when neither does.
func FindKubeBin() string {
	if d := os.Getenv(EnvKubeBin); d != "" {
		return d
	}
	if c := KubeBinCache(); c != "" {
		d := filepath.Join(c, "current")
		if _, err := os.Stat(filepath.Join(d, "kube-apiserver")); err == nil {
			return d
		}
	}
	return ""
}

// FindCRDDir returns <repo>/config/crd, looked for above the executable's
// folder and above the working directory.
func FindCRDDir(self string) string {
	return findInRepo(self, filepath.Join("config", "crd"))
}

// findInRepo looks for rel above the executable's folder and above the
// working directory and returns the folder holding it.
func findInRepo(self, rel string) string {
	var starts []string
	if self != "" {
		starts = append(starts, filepath.Dir(self))
	}
	if wd, err := os.Getwd(); err == nil {
		starts = append(starts, wd)
	}
	for _, dir := range starts {
		for range 8 {
			p := filepath.Join(dir, rel)
			if _, err := os.Stat(p); err == nil {
				return p
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	return ""
}

// nodePodCIDRs returns node i's pod CIDRs (1-based): 10.244.i.0/24 and
// fd00:244:0:i::/64.
func nodePodCIDRs(i int) (netip.Prefix, netip.Prefix) {
	b4 := ClusterCIDR4.Addr().As4()
	b4[2] = byte(i)
	b6 := ClusterCIDR6.Addr().As16()
	b6[7] = byte(i)
	return netip.PrefixFrom(netip.AddrFrom4(b4), 24), netip.PrefixFrom(netip.AddrFrom16(b6), 64)
}
