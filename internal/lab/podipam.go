package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// Pod IPAM in the lab (`lab up --pod-ipam=MODE`): the kubelet stand-in
// sets up every pod through libcni with the reference bridge (or ptp) and
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

// Pod networks (the main CNI plugin) of the lab.
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

// PodNetworkName is the CNI network the lab's conflist defines.
const PodNetworkName = "mooring-lab"

// cniBinaries are the reference plugins the lab links from the
// hack/cniplugins build.
var cniBinaries = []string{"bridge", "ptp", "loopback"}

// podIPAM reports whether the lab wires pods through CNI.
func (c *Config) usesPodIPAM() bool { return c.PodIPAM != "" && c.PodIPAM != PodIPAMOff }

// validatePodIPAM checks the pod IPAM settings, naming the fix.
func (c *Config) validatePodIPAM() error {
	switch c.PodIPAM {
	case "", PodIPAMOff:
		return nil
	case PodIPAMKubernetes, PodIPAMClusterPool, PodIPAMMultiPool:
	default:
		return fmt.Errorf("lab: --pod-ipam %q: use off, kubernetes, cluster-pool or multi-pool", c.PodIPAM)
	}
	switch c.PodNetwork {
	case "", PodNetworkBridge, PodNetworkPTP:
	default:
		return fmt.Errorf("lab: --pod-network %q: use bridge or ptp", c.PodNetwork)
	}
	if !c.Mooring {
		return fmt.Errorf("lab: --pod-ipam=%s needs Mooring's agents (drop --no-mooring)", c.PodIPAM)
	}
	for _, b := range cniBinaries {
		if !isExecutable(filepath.Join(c.CNIPlugins, b)) {
			return fmt.Errorf("lab: CNI plugin %s not found in %q: run hack/cniplugins/build.sh and pass its last line as --cni-plugins (or set %s)", b, c.CNIPlugins, EnvCNIPlugins)
		}
	}
	if !isExecutable(c.IPAMPlugin) {
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
	if p := filepath.Join(filepath.Dir(self), "mooring-ipam"); isExecutable(p) {
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
	main := `{"type":"bridge","bridge":"mbr0","isGateway":true,"hairpinMode":true,"ipam":` + ipam + `}`
	if network == PodNetworkPTP {
		main = `{"type":"ptp","ipam":` + ipam + `}`
	}
	return `{"cniVersion":"1.1.0","name":"` + PodNetworkName + `","plugins":[` + main + `,{"type":"mooring-ipam","socket":` + sock + `}]}` + "\n"
}

// writeCNI links the plugins into the lab's CNI bin folder and writes
// every node's conflist.
func (c *Cluster) writeCNI() error {
	bin := c.paths.cniBin()
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return err
	}
	links := map[string]string{"mooring-ipam": c.cfg.IPAMPlugin}
	for _, b := range cniBinaries {
		links[b] = filepath.Join(c.cfg.CNIPlugins, b)
	}
	for name, target := range links {
		abs, err := filepath.Abs(target)
		if err != nil {
			return err
		}
		if err := os.Symlink(abs, filepath.Join(bin, name)); err != nil {
			return fmt.Errorf("lab: CNI plugin %s: %w", name, err)
		}
	}
	for _, n := range c.nodes {
		cp := c.paths.cni(n.Name)
		if err := os.MkdirAll(filepath.Dir(cp.ConfList), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(cp.ConfList, []byte(conflist(c.cfg.PodNetwork, cp.Socket)), 0o644); err != nil {
			return err
		}
	}
	return nil
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
	return []string{"--pod-ipam-socket=" + cp.Socket, "--pod-ipam-state-dir=" + cp.IPAMState, "--pod-routes=direct"}
}

// prepareMooringNamespace creates the namespace where the controller
// records the pod IPAM mode: it refuses to start without it.
func (c *Cluster) prepareMooringNamespace(ctx context.Context) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mooringNamespace}}
	_, err := c.cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab: creating namespace %s: %w", mooringNamespace, err)
	}
	return nil
}

// waitModeRecorded waits until the controller has recorded the pod IPAM
// mode: an agent that starts before the record reads "off" and serves no
// pod addresses until it is restarted.
func (c *Cluster) waitModeRecorded(ctx context.Context) error {
	err := poll(ctx, 50*time.Millisecond, func() (bool, error) {
		if c.exited("mooring-controller") {
			return false, fmt.Errorf("lab: the Mooring controller exited before recording pod IPAM mode %s (see %s)",
				c.cfg.PodIPAM, filepath.Join(c.paths.Logs, logName("mooring-controller")))
		}
		_, err := c.cs.CoreV1().ConfigMaps(mooringNamespace).Get(ctx, podipamctl.ModeConfigMap, metav1.GetOptions{})
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("lab: waiting for the pod IPAM mode record: %w", err)
	}
	c.progress("pod IPAM mode recorded")
	return nil
}

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

// createPodIPPool creates pool through the dynamic client.
func createPodIPPool(ctx context.Context, dyn dynamic.Interface, pool *mooringv1.PodIPPool) error {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pool)
	if err != nil {
		return err
	}
	_, err = dyn.Resource(podIPPoolGVR).Create(ctx, &unstructured.Unstructured{Object: m}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("lab: creating PodIPPool %s: %w", pool.Name, err)
	}
	return nil
}

// kcmControllers are the kube-controller-manager controllers the lab
// runs: node IPAM too in the kubernetes mode.
func kcmControllers(c *Config) string {
	s := "endpointslice-controller,node-lifecycle-controller"
	if c.PodIPAM == PodIPAMKubernetes {
		s += ",node-ipam-controller"
	}
	return s
}
