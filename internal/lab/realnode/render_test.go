package realnode

import (
	"net/netip"
	"strings"
	"testing"
)

func testNode() *Node {
	return &Node{
		Name: "node-1", Dir: "/run/lab/nodes/node-1",
		Addrs:        []netip.Addr{netip.MustParseAddr("10.213.0.11"), netip.MustParseAddr("fd00:213::11")},
		Labels:       map[string]string{"b": "2", "a": ""},
		PodCIDRs:     []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.MustParsePrefix("fd00:244:0:1::/64")},
		CgroupParent: "/mooring-lab-42/node-1",
		CACert:       "/run/lab/pki/ca.crt", Kubeconfig: "/run/lab/nodes/node-1/kubeconfig",
		Containerd: "/c", Runc: "/usr/sbin/runc", Kubelet: "/k/kubelet", CNIPlugins: "/cni",
		SandboxImage: "mooring.dev/lab/pause:v1",
	}
}

// TestContainerdTOMLHoldsWhatTheMachineForces pins the settings without
// which containerd fails on these hosts (REAL-NODES-NOTES).
func TestContainerdTOMLHoldsWhatTheMachineForces(t *testing.T) {
	s := testNode().ContainerdTOML()
	for _, want := range []string{
		"version = 3",
		`root = "/run/lab/nodes/node-1/containerd"`,
		`state = "/run/lab/nodes/node-1/run/containerd-state"`,
		`address = "/run/containerd/containerd.sock"`,
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`sandbox = "mooring.dev/lab/pause:v1"`,
		`BinaryName = "/usr/sbin/runc"`,
		"SystemdCgroup = false",
		`bin_dirs = ["/opt/cni/bin"]`,
		`conf_dir = "/etc/cni/net.d"`,
		"[plugins.'io.containerd.nri.v1.nri']\n    disable = true",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("containerd config lacks %q:\n%s", want, s)
		}
	}
}

func TestKubeletYAML(t *testing.T) {
	s := testNode().KubeletYAML()
	for _, want := range []string{
		"containerRuntimeEndpoint: unix:///run/containerd/containerd.sock",
		"cgroupDriver: cgroupfs", "cgroupRoot: /mooring-lab-42/node-1", "failCgroupV1: false",
		"protectKernelDefaults: true", "clientCAFile: /run/lab/pki/ca.crt", "mode: Webhook",
		"imageGCHighThresholdPercent: 100", "volumePluginDir: /run/lab/nodes/node-1/disk/volume-plugins",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("kubelet config lacks %q:\n%s", want, s)
		}
	}
}

func TestKubeletArgs(t *testing.T) {
	got := strings.Join(testNode().KubeletArgs(), " ")
	for _, want := range []string{"--node-ip=10.213.0.11,fd00:213::11", "--node-labels=a=,b=2", "--hostname-override=node-1"} {
		if !strings.Contains(got, want) {
			t.Errorf("kubelet args %q lack %q", got, want)
		}
	}
}

func TestStaticConfList(t *testing.T) {
	got := StaticConfList(testNode().PodCIDRs)
	want := `{"cniVersion":"1.0.0","name":"mooring-lab","plugins":[{"type":"bridge","bridge":"cni0","isGateway":true,"hairpinMode":true,` +
		`"ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.1.0/24"}],[{"subnet":"fd00:244:0:1::/64"}]],"routes":[{"dst":"0.0.0.0/0"},{"dst":"::/0"}]}}]}` + "\n"
	if got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	n := testNode()
	n.ConfList = "{}"
	if n.NetworkConfList() != "{}" {
		t.Error("a given network must win over the static one")
	}
}

// TestBindsCoverTheSharedHostPaths: every fixed path several kubelets
// would share is private per node, run/ ones under run/ (cleared on
// reboot).
func TestBindsCoverTheSharedHostPaths(t *testing.T) {
	n := testNode()
	got := map[string]string{}
	for _, b := range n.Binds() {
		got[b.Target] = b.Source
	}
	for _, p := range []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/run/containerd", "/opt/cni/bin", "/etc/cni/net.d", "/var/lib/cni", "/var/lib/mooring", "/run/mooring"} {
		if got[p] == "" || !strings.HasPrefix(got[p], n.Dir+"/") {
			t.Errorf("%s is not private to the node: %q", p, got[p])
		}
	}
	if !strings.HasPrefix(got["/run/containerd"], n.RunDir()+"/") || strings.HasPrefix(got["/var/lib/kubelet"], n.RunDir()+"/") {
		t.Errorf("run/ holds /run only: %v", got)
	}
	if len(MountPoints()) != len(n.Binds()) {
		t.Error("MountPoints and Binds disagree")
	}
}

func TestValidate(t *testing.T) {
	for name, mut := range map[string]func(*Node){
		"relative dir": func(n *Node) { n.Dir = "x" },
		"root cgroup":  func(n *Node) { n.CgroupParent = "/" },
		"no network":   func(n *Node) { n.PodCIDRs = nil },
		"no sandbox":   func(n *Node) { n.SandboxImage = "" },
		"no address":   func(n *Node) { n.Addrs = nil },
	} {
		n := testNode()
		mut(n)
		if err := n.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := testNode().Validate(); err != nil {
		t.Error(err)
	}
}
