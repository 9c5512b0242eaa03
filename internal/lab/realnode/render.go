package realnode

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// ContainerdTOML is the node's containerd configuration (version 3, for
// containerd 2.x). What this machine forces (REAL-NODES-NOTES, docs/lab.md):
// cgroupfs and not systemd (cgroup v1, no systemd), restrict_oom_score_adj
// (the lab runs without CAP_SYS_RESOURCE: without it the first sandbox
// fails with "can't get final child's PID from pipe: EOF"), a pinned
// sandbox image (no registry to pull registry.k8s.io/pause from), the
// pods' netns files under the node's state (not the host's /run/netns),
// and NRI off (its socket is another fixed host path).
func (n *Node) ContainerdTOML() string {
	q := strconv.Quote
	var b strings.Builder
	fmt.Fprintf(&b, "version = 3\nroot = %s\nstate = %s\n\n", q(n.ContainerdRoot()), q(n.ContainerdState()))
	fmt.Fprintf(&b, "[grpc]\n  address = %s\n\n[ttrpc]\n  address = %s\n\n", q(Socket), q(Socket+".ttrpc"))
	b.WriteString("[plugins]\n")
	// NRI's socket is a fixed host path (/var/run/nri/nri.sock): two
	// nodes' containerds race for it and the loser exits ("failed to set
	// up NRI for CRI service"). The lab runs no NRI plugin.
	b.WriteString("  [plugins.'io.containerd.nri.v1.nri']\n    disable = true\n")
	fmt.Fprintf(&b, "  [plugins.'io.containerd.cri.v1.images']\n    snapshotter = \"overlayfs\"\n")
	fmt.Fprintf(&b, "    [plugins.'io.containerd.cri.v1.images'.pinned_images]\n      sandbox = %s\n", q(n.SandboxImage))
	b.WriteString("  [plugins.'io.containerd.cri.v1.runtime']\n")
	b.WriteString("    restrict_oom_score_adj = true\n    netns_mounts_under_state_dir = true\n    enable_selinux = false\n")
	b.WriteString("    [plugins.'io.containerd.cri.v1.runtime'.cni]\n")
	fmt.Fprintf(&b, "      bin_dirs = [%s]\n      conf_dir = %s\n      max_conf_num = 1\n", q(CNIBinDir), q(CNIConfDir))
	b.WriteString("    [plugins.'io.containerd.cri.v1.runtime'.containerd]\n      default_runtime_name = \"runc\"\n")
	b.WriteString("      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]\n        runtime_type = \"io.containerd.runc.v2\"\n")
	b.WriteString("        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]\n")
	fmt.Fprintf(&b, "          BinaryName = %s\n          SystemdCgroup = false\n", q(n.Runc))
	// The stream server (kubectl exec, attach, port-forward) listens in
	// the node's namespace only.
	b.WriteString("  [plugins.'io.containerd.grpc.v1.cri']\n    stream_server_address = \"127.0.0.1\"\n    stream_server_port = \"0\"\n")
	return b.String()
}

// KubeletYAML is the node's KubeletConfiguration. What this machine forces
// (docs/lab.md): failCgroupV1 false (cgroup v1 hosts), cgroupfs, and
// protectKernelDefaults: the lab sets the kernel values a kubelet wants
// before it starts (Host.SetSysctls) and restores them on `lab down`, so
// no kubelet writes host-wide sysctls itself. Image garbage collection
// never runs: the side-loaded images cannot be pulled back.
func (n *Node) KubeletYAML() string {
	var b strings.Builder
	b.WriteString("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	fmt.Fprintf(&b, "containerRuntimeEndpoint: unix://%s\n", Socket)
	fmt.Fprintf(&b, "cgroupDriver: cgroupfs\ncgroupRoot: %s\nfailCgroupV1: false\nfailSwapOn: false\n", n.CgroupParent)
	b.WriteString("protectKernelDefaults: true\n")
	fmt.Fprintf(&b, "volumePluginDir: %s\n", n.VolumePluginDir())
	b.WriteString("authentication:\n  anonymous:\n    enabled: false\n  webhook:\n    enabled: true\n")
	fmt.Fprintf(&b, "  x509:\n    clientCAFile: %s\n", n.CACert)
	b.WriteString("authorization:\n  mode: Webhook\n")
	b.WriteString("readOnlyPort: 0\nhealthzBindAddress: 127.0.0.1\nserializeImagePulls: false\n")
	b.WriteString("imageGCHighThresholdPercent: 100\nimageGCLowThresholdPercent: 99\n")
	b.WriteString("evictionHard:\n  memory.available: 50Mi\n  nodefs.available: 1%\n  nodefs.inodesFree: 1%\n  imagefs.available: 1%\n")
	// The lab's nodes report often enough that a killed node is seen as
	// NotReady within the controller manager's grace period.
	b.WriteString("nodeStatusUpdateFrequency: 2s\nnodeStatusReportFrequency: 10s\n")
	b.WriteString("syncFrequency: 10s\nfileCheckFrequency: 10s\nshutdownGracePeriod: 0s\n")
	b.WriteString("containerLogMaxSize: 5Mi\ncontainerLogMaxFiles: 2\n")
	return b.String()
}

// StaticConfList is the node's pod network without pod IPAM: the bridge
// plugin (gateway on the bridge, the node routes) with host-local handing
// out the node's pod CIDRs.
func StaticConfList(cidrs []netip.Prefix) string {
	ranges := make([]string, len(cidrs))
	routes := make([]string, len(cidrs))
	for i, p := range cidrs {
		ranges[i] = `[{"subnet":"` + p.Masked().String() + `"}]`
		def := "0.0.0.0/0"
		if p.Addr().Is6() {
			def = "::/0"
		}
		routes[i] = `{"dst":"` + def + `"}`
	}
	ipam := `{"type":"host-local","ranges":[` + strings.Join(ranges, ",") + `],"routes":[` + strings.Join(routes, ",") + `]}`
	return `{"cniVersion":"1.0.0","name":"mooring-lab","plugins":[{"type":"bridge","bridge":"` + Bridge +
		`","isGateway":true,"hairpinMode":true,"ipam":` + ipam + `}]}` + "\n"
}

// NetworkConfList is what the lab writes into the node's CNIConfDir ("":
// nothing, the chart writes it).
func (n *Node) NetworkConfList() string {
	if n.CNIFromChart {
		return ""
	}
	if n.ConfList != "" {
		return n.ConfList
	}
	return StaticConfList(n.PodCIDRs)
}
