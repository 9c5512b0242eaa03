package lab

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// Pod IPAM in the lab (`lab up --pod-ipam=MODE`): the kubelet stand-in
// sets up every pod through libcni with the reference ptp (or bridge) and
// loopback plugins and mooring-ipam, the agents allocate from the blocks
// of the mode and route other nodes' blocks (--pod-routes=direct), and the
// lab installs no pod route of its own. Without it (the default) the
// stand-in gives each pod a static address of its node's 10.244.i.0/24 and
// the lab routes those: quicker to start, and no Mooring needed.

// Pod IPAM modes of the lab; "" and PodIPAMOff are the static wiring.
const (
	PodIPAMOff         = "off"
	PodIPAMKubernetes  = string(podipamctl.ModeKubernetes)
	PodIPAMClusterPool = string(podipamctl.ModeClusterPool)
	PodIPAMMultiPool   = string(podipamctl.ModeMultiPool)
)

// Pod networks (the main CNI plugin) of the lab. ptp, the default, routes
// each pod's /32 and /128 through its own veth, so a node may hold any
// number of blocks; bridge puts every pod on one bridge holding the block's
// gateway, which the reference plugin allows once per IPv4 family.
const (
	PodNetworkBridge = "bridge"
	PodNetworkPTP    = "ptp"
)

// The CIDRs every mode cuts node blocks from: kube-controller-manager's
// --cluster-cidr, cluster-pool's lists and multi-pool's default pool.
// Both lie inside ClusterCIDR4/6 (kube-proxy's --cluster-cidr).
var (
	PodIPAMCIDR4 = netip.MustParsePrefix("10.244.0.0/16")
	PodIPAMCIDR6 = netip.MustParsePrefix("fd00:244::/112")
)

// The block sizes: a /24 (254 pods) and a /120 per node and family.
const (
	PodIPAMMask4 = 24
	PodIPAMMask6 = 120
)

// podBridge is the bridge of the bridge pod network.
const podBridge = "mbr0"

// PodNetworkName is the CNI network the lab's conflist defines.
const PodNetworkName = "mooring-lab"

// cniBinaries are the reference plugins the lab links from the
// hack/cniplugins build.
var cniBinaries = []string{"bridge", "ptp", "loopback"}

// podIPAM reports whether the lab wires pods through CNI.
func (c *Config) usesPodIPAM() bool { return c.PodIPAM != "" && c.PodIPAM != PodIPAMOff }

// validatePodIPAM checks the pod IPAM settings, naming the fix.
// validatePodIPAMFlags checks --pod-ipam, --pod-network and what they
// cannot go with.
func (c *Config) validatePodIPAMFlags() error {
	switch c.PodIPAM {
	case "", PodIPAMOff:
		return nil
	case PodIPAMKubernetes, PodIPAMClusterPool, PodIPAMMultiPool:
	default:
		return fmt.Errorf("lab: --pod-ipam %q: use off, kubernetes, cluster-pool or multi-pool", c.PodIPAM)
	}
	switch c.PodNetwork {
	case "", PodNetworkPTP:
	case PodNetworkBridge:
		if c.PodIPAM == PodIPAMMultiPool {
			// bridge refuses a second IPv4 gateway address on its bridge
			// ("already has an IP address different from ...").
			return errors.New("lab: --pod-network=bridge cannot serve multi-pool: the reference bridge plugin keeps one IPv4 gateway per bridge, and a node holds a block of each pool in use; use ptp")
		}
	default:
		return fmt.Errorf("lab: --pod-network %q: use ptp or bridge", c.PodNetwork)
	}
	if !c.Mooring {
		return fmt.Errorf("lab: --pod-ipam=%s needs Mooring's agents (drop --no-mooring)", c.PodIPAM)
	}
	return nil
}

// validatePodIPAM checks what --pod-ipam needs on this machine.
func (c *Config) validatePodIPAM() error {
	if !c.usesPodIPAM() {
		return nil
	}
	for _, b := range cniBinaries {
		if !isExecFile(filepath.Join(c.CNIPlugins, b)) {
			return fmt.Errorf("lab: CNI plugin %s not found in %q: run hack/cniplugins/build.sh and pass its last line as --cni-plugins (or set %s)", b, c.CNIPlugins, EnvCNIPlugins)
		}
	}
	if c.realNodes() {
		return nil // the chart's install-cni brings mooring-ipam
	}
	if !isExecFile(c.IPAMPlugin) {
		return fmt.Errorf("lab: mooring-ipam not found at %q: run `make build` (it builds bin/mooring-ipam) or pass --ipam-plugin", c.IPAMPlugin)
	}
	return nil
}

// EnvCNIPlugins names the folder of the reference CNI plugins (set by
// `make test`; hack/cniplugins/build.sh prints it).
const EnvCNIPlugins = "MOORING_CNIPLUGINS"

// FindCNIPlugins returns $MOORING_CNIPLUGINS, else the newest build of
// hack/cniplugins under ${XDG_CACHE_HOME:-~/.cache}/mooring/cniplugins
// holding bridge; "" when there is none.
func FindCNIPlugins() string {
	if d := os.Getenv(EnvCNIPlugins); d != "" {
		return d
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	dirs, _ := filepath.Glob(filepath.Join(cache, "mooring", "cniplugins", "*", "bridge"))
	best, bestTime := "", time.Time{}
	for _, b := range dirs {
		if st, err := os.Stat(b); err == nil && st.ModTime().After(bestTime) {
			best, bestTime = filepath.Dir(b), st.ModTime()
		}
	}
	return best
}

// FindIPAMPlugin returns the mooring-ipam beside the mooring executable
// (`make build` puts both in bin/), else bin/mooring-ipam of the
// repository; "" when neither exists.
func FindIPAMPlugin(self string) string {
	if p := filepath.Join(filepath.Dir(self), "mooring-ipam"); isExecFile(p) {
		return p
	}
	if d := findInRepo(self, filepath.Join("bin", "mooring-ipam")); d != "" {
		return d
	}
	return ""
}

// cniPaths are one node's CNI files under the state dir.
type cniPaths struct {
	ConfList, Cache, Socket, IPAMState string
}

func (p paths) cniBin() string { return filepath.Join(p.Dir, "cni", "bin") }

func (p paths) cni(node string) cniPaths {
	d := filepath.Join(p.Dir, "cni", node)
	return cniPaths{
		ConfList:  filepath.Join(d, "10-"+PodNetworkName+".conflist"),
		Cache:     filepath.Join(d, "cache"),
		Socket:    filepath.Join(d, "ipamd.sock"),
		IPAMState: filepath.Join(d, "ipam"),
	}
}

// conflist is node's pod network: the main plugin with mooring-ipam as
// its IPAM, then mooring-ipam again as its own entry, which is where a
// runtime's GC reaches the agent (bridge and ptp do not pass GC on).
func conflist(network, socket string) string {
	sock := strconv.Quote(socket)
	ipam := `{"type":"mooring-ipam","socket":` + sock + `}`
	main := `{"type":"ptp","ipam":` + ipam + `}`
	if network == PodNetworkBridge {
		main = `{"type":"bridge","bridge":"` + podBridge + `","isGateway":true,"hairpinMode":true,"ipam":` + ipam + `}`
	}
	return `{"cniVersion":"1.1.0","name":"` + PodNetworkName + `","plugins":[` + main + `,{"type":"mooring-ipam","socket":` + sock + `}]}` + "\n"
}

// podIPAMControllerArgs are the controller's flags for the mode.
func podIPAMControllerArgs(c *Config) []string {
	if !c.usesPodIPAM() {
		return nil
	}
	args := []string{"--pod-ipam-mode=" + c.PodIPAM}
	if c.PodIPAM == PodIPAMClusterPool {
		args = append(args,
			"--cluster-pool-ipv4-cidr="+PodIPAMCIDR4.String(), "--cluster-pool-ipv4-mask-size="+strconv.Itoa(PodIPAMMask4),
			"--cluster-pool-ipv6-cidr="+PodIPAMCIDR6.String(), "--cluster-pool-ipv6-mask-size="+strconv.Itoa(PodIPAMMask6))
	}
	return args
}

// podIPAMChartArgs are the `helm template` values of the mode on real
// nodes: what docs/podipam.md tells a user to set (the mode, and the
// node's network written by the chart's install-cni with the main plugin
// of --pod-network), the lab's CIDRs, and the lab's short release grace
// (RealNodesPodIPAMReleaseGrace).
func podIPAMChartArgs(c *Config) []string {
	if !c.usesPodIPAM() {
		return nil
	}
	network := c.PodNetwork
	if network == "" {
		network = PodNetworkPTP
	}
	set := []string{"controller.flags.podIpamMode=" + c.PodIPAM, "agent.cni.network=" + network,
		"agent.flags.podIpamReleaseGrace=" + RealNodesPodIPAMReleaseGrace.String()}
	if c.PodIPAM == PodIPAMClusterPool {
		set = append(set,
			"controller.flags.clusterPoolIpv4Cidr="+PodIPAMCIDR4.String(), "controller.flags.clusterPoolIpv4MaskSize="+strconv.Itoa(PodIPAMMask4),
			"controller.flags.clusterPoolIpv6Cidr="+PodIPAMCIDR6.String(), "controller.flags.clusterPoolIpv6MaskSize="+strconv.Itoa(PodIPAMMask6))
	}
	var args []string
	for _, s := range set {
		args = append(args, "--set", s)
	}
	return args
}

// podIPAMKCMArgs turn on kube-controller-manager's node IPAM in the
// kubernetes mode (node.spec.podCIDRs are then its to write).
func podIPAMKCMArgs(c *Config) []string {
	if c.PodIPAM != PodIPAMKubernetes {
		return nil
	}
	return []string{
		"--allocate-node-cidrs",
		"--cluster-cidr=" + PodIPAMCIDR4.String() + "," + PodIPAMCIDR6.String(),
		"--node-cidr-mask-size-ipv4=" + strconv.Itoa(PodIPAMMask4),
		"--node-cidr-mask-size-ipv6=" + strconv.Itoa(PodIPAMMask6),
	}
}

// podIPAMKubeletArgs replace --pod-cidrs with the node's CNI files.
func podIPAMKubeletArgs(p paths, node string) []string {
	cp := p.cni(node)
	return []string{"--cni-conf=" + cp.ConfList, "--cni-bin-dir=" + p.cniBin(), "--cni-cache-dir=" + cp.Cache}
}

// podIPAMAgentArgs give each agent its own socket and store (the node
// namespaces share one filesystem).
func podIPAMAgentArgs(c *Config, p paths, node string) []string {
	if !c.usesPodIPAM() {
		return nil
	}
	cp := p.cni(node)
	return []string{"--pod-ipam-socket=" + cp.Socket, "--pod-ipam-state-dir=" + cp.IPAMState, "--pod-routes=direct",
		"--pod-ipam-release-grace=" + PodIPAMReleaseGrace.String()}
}

// RealNodesPodIPAMReleaseGrace is PodIPAMReleaseGrace on real nodes. A
// pod of a pool its node holds no block of fails its first ADD, which
// makes the agent ask for a block, and the kubelet retries the pod 10-15 s
// later (kubelet.go backOffPeriod 10 s, pod worker jitter 0.5): a block
// released sooner is gone again by then. With 10 s, a multi-pool pod
// waited over two minutes for its address in one of four runs of
// TestRealNodesPodIPAM (each retry found the new block released).
const RealNodesPodIPAMReleaseGrace = time.Minute

// PodIPAMReleaseGrace is how long the lab's agents keep an empty block
// before giving it back (5 min by default): short enough to watch.
const PodIPAMReleaseGrace = 10 * time.Second

var podIPPoolGVR = mooringv1.GroupVersion.WithResource("podippools")

// DefaultPodIPPool is the multi-pool lab's pool "default": the same CIDRs
// and block sizes as the other modes.
func DefaultPodIPPool() *mooringv1.PodIPPool {
	return &mooringv1.PodIPPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: "PodIPPool"},
		ObjectMeta: metav1.ObjectMeta{Name: podipamctl.DefaultPool},
		Spec: mooringv1.PodIPPoolSpec{
			IPv4: &mooringv1.PodIPPoolFamily{CIDRs: []string{PodIPAMCIDR4.String()}, MaskSize: PodIPAMMask4},
			IPv6: &mooringv1.PodIPPoolFamily{CIDRs: []string{PodIPAMCIDR6.String()}, MaskSize: PodIPAMMask6},
		},
	}
}

// kcmControllers are the kube-controller-manager controllers the lab
// runs: node IPAM too in the kubernetes mode, and with the chart installed
// those that make pods of Deployments and DaemonSets.
func kcmControllers(c *Config) string {
	s := "endpointslice-controller,node-lifecycle-controller"
	if c.PodIPAM == PodIPAMKubernetes {
		s += ",node-ipam-controller"
	}
	switch {
	case c.Install == InstallChart:
		s += ",deployment-controller,replicaset-controller,daemonset-controller"
	case c.BGP.Enabled && c.MetalLB == "":
		// The BGP lab's backends roll (externalTrafficPolicy: Local).
		// Not with MetalLB, whose Deployment the lab runs itself (and
		// no garbage collector would remove a ReplicaSet's pods).
		s += ",deployment-controller,replicaset-controller"
	}
	if c.realNodes() {
		s += realNodeKCMControllers
	}
	if c.MetalLB != "" {
		// Removing what MetalLB leaves behind ends with its namespace,
		// whose contents the namespace controller deletes; the migration
		// deletes MetalLB's controller orphaning its pods, which the
		// garbage collector finishes.
		s += ",namespace-controller"
		if !c.realNodes() { // real nodes run it anyway
			s += ",garbage-collector-controller"
		}
	}
	return s
}

// isExecFile reports whether path is an executable regular file.
func isExecFile(path string) bool {
	st, err := os.Stat(path)
	return err == nil && st.Mode().IsRegular() && st.Mode().Perm()&0o111 != 0
}
