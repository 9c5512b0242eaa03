package realnode

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
)

// Node is one real node's plan; everything in it is fixed before the node
// starts, and a restored node runs with the same plan.
type Node struct {
	Name   string
	Addrs  []netip.Addr // eth0: IPv4, IPv6 (kubelet's --node-ip)
	Labels map[string]string
	// PodCIDRs, when set, are the node's static pod network (the bridge
	// plugin with host-local); without them ConfList is the node's CNI
	// network, or with CNIFromChart the node gets none from the lab (pod
	// IPAM: the chart's install-cni writes it and puts mooring-ipam in).
	PodCIDRs     []netip.Prefix
	ConfList     string
	CNIFromChart bool
	// Dir is the node's disk and run folders (Layout).
	Dir string
	// CgroupParent is the node's cgroup under every hierarchy, e.g.
	// /mooring-lab-1a2b3c4d/node-1: the kubelet's cgroupRoot.
	CgroupParent string
	// CACert is the lab's CA (the apiserver's and the kubelet's client CA);
	// Kubeconfig is the node's identity (system:node:<Name>).
	CACert, Kubeconfig string
	// Containerd is the folder of containerd, containerd-shim-runc-v2 and
	// ctr; Runc the runc binary; Kubelet the kubelet binary; CNIPlugins the
	// folder of the reference plugins copied into the node's /opt/cni/bin.
	Containerd, Runc, Kubelet, CNIPlugins string
	// SandboxImage is the pause image's name once imported.
	SandboxImage string
}

// Bind is one private folder of the node mounted over a host path inside
// the node's mount namespace.
type Bind struct{ Source, Target string }

// Fixed paths inside a node's mount namespace.
const (
	// Socket is containerd's CRI socket (under the private /run/containerd).
	Socket = "/run/containerd/containerd.sock"
	// CNIBinDir and CNIConfDir are where containerd looks for plugins and
	// networks: the host defaults, private per node, so that the chart's
	// install-cni writes into the node it runs on.
	CNIBinDir  = "/opt/cni/bin"
	CNIConfDir = "/etc/cni/net.d"
	// ConfListName is the node's network file in CNIConfDir.
	ConfListName = "10-mooring-lab.conflist"
	// Bridge is the static pod network's bridge.
	Bridge = "cni0"
)

// binds are the host paths every node gets a private copy of: what a
// kubelet, containerd, the CNI plugins and the chart's hostPath volumes
// write to (docs/lab.md "Real nodes"). run/ is a node's tmpfs: Reboot
// empties it.
var binds = []struct {
	target string
	run    bool
}{
	{"/var/lib/kubelet", false},
	{"/var/log/pods", false},
	{"/var/log/containers", false},
	{"/var/lib/cni", false},
	{CNIConfDir, false},
	{CNIBinDir, false},
	{"/var/lib/mooring", false},
	{"/run/containerd", true},
	{"/run/mooring", true},
}

// Binds are the node's private folders and the host paths they cover, in
// mount order.
func (n *Node) Binds() []Bind {
	out := make([]Bind, 0, len(binds))
	for _, b := range binds {
		out = append(out, Bind{Source: n.bindSource(b.target, b.run), Target: b.target})
	}
	return out
}

// MountPoints are the host paths the binds cover (each must exist on the
// host as a folder: Host.EnsureDirs).
func MountPoints() []string {
	out := make([]string, 0, len(binds))
	for _, b := range binds {
		out = append(out, b.target)
	}
	return out
}

func (n *Node) bindSource(target string, run bool) string {
	top := "disk"
	if run {
		top = "run"
	}
	return filepath.Join(n.Dir, top, strings.ReplaceAll(strings.Trim(target, "/"), "/", "-"))
}

// Paths of the node's own files (outside any bind: the lab reads them
// from the host).
func (n *Node) RunDir() string          { return filepath.Join(n.Dir, "run") }
func (n *Node) ContainerdRoot() string  { return filepath.Join(n.Dir, "containerd") }
func (n *Node) ContainerdState() string { return filepath.Join(n.Dir, "run", "containerd-state") }
func (n *Node) ContainerdConfig() string {
	return filepath.Join(n.Dir, "containerd.toml")
}
func (n *Node) KubeletConfig() string   { return filepath.Join(n.Dir, "kubelet.yaml") }
func (n *Node) VolumePluginDir() string { return filepath.Join(n.Dir, "disk", "volume-plugins") }

// ContainerdArgs is containerd's command line.
func (n *Node) ContainerdArgs() []string {
	return []string{"--config", n.ContainerdConfig()}
}

// KubeletArgs is the kubelet's command line (the rest is in its config
// file).
func (n *Node) KubeletArgs() []string {
	ips := make([]string, len(n.Addrs))
	for i, a := range n.Addrs {
		ips[i] = a.String()
	}
	return []string{
		"--config=" + n.KubeletConfig(),
		"--kubeconfig=" + n.Kubeconfig,
		"--hostname-override=" + n.Name,
		"--node-ip=" + strings.Join(ips, ","),
		"--node-labels=" + joinLabels(n.Labels),
		"--v=1",
	}
}

// CtrArgs is ctr's global flags for this node, followed by args.
func (n *Node) CtrArgs(args ...string) []string {
	return append([]string{"--address", Socket, "--namespace", "k8s.io"}, args...)
}

func joinLabels(m map[string]string) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for i, k := range keys {
		keys[i] = k + "=" + m[k]
	}
	return strings.Join(keys, ",")
}

// Validate reports the first missing piece of the plan.
func (n *Node) Validate() error {
	switch {
	case n.Name == "" || n.Dir == "" || !filepath.IsAbs(n.Dir):
		return fmt.Errorf("realnode: node %q needs an absolute folder, got %q", n.Name, n.Dir)
	case len(n.Addrs) == 0:
		return fmt.Errorf("realnode: node %s has no address", n.Name)
	case !strings.HasPrefix(n.CgroupParent, "/") || n.CgroupParent == "/":
		return fmt.Errorf("realnode: node %s: cgroup parent %q must be an absolute path below /", n.Name, n.CgroupParent)
	case len(n.PodCIDRs) == 0 && n.ConfList == "" && !n.CNIFromChart:
		return fmt.Errorf("realnode: node %s has neither pod CIDRs nor a CNI network", n.Name)
	case n.SandboxImage == "":
		return fmt.Errorf("realnode: node %s has no sandbox image", n.Name)
	}
	return nil
}
