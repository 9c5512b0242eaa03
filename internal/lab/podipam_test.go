package lab

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
)

// The conflist is what a runtime would load: a valid CNI 1.1 list with the
// main plugin using mooring-ipam, then mooring-ipam as its own entry (where
// GC reaches the agent), both on the node's socket.
func TestConflist(t *testing.T) {
	for _, network := range []string{"", PodNetworkPTP, PodNetworkBridge} {
		l, err := libcni.ConfListFromBytes([]byte(conflist(network, "/run/lab/cni/node-1/ipamd.sock")))
		if err != nil {
			t.Fatalf("%q: %v", network, err)
		}
		want := PodNetworkPTP
		if network == PodNetworkBridge {
			want = PodNetworkBridge
		}
		if l.CNIVersion != "1.1.0" || l.Name != PodNetworkName || len(l.Plugins) != 2 ||
			l.Plugins[0].Network.Type != want || l.Plugins[0].Network.IPAM.Type != "mooring-ipam" ||
			l.Plugins[1].Network.Type != "mooring-ipam" {
			t.Errorf("%q: list %+v", network, l)
		}
		for _, p := range l.Plugins {
			if !strings.Contains(string(p.Bytes), `"socket":"/run/lab/cni/node-1/ipamd.sock"`) {
				t.Errorf("%q: %s does not name the node's socket", network, p.Bytes)
			}
		}
	}
}

// Each mode hands the right flags to the right component: the controller
// its mode (and cluster-pool's CIDRs), kube-controller-manager node IPAM
// in the kubernetes mode only, the kubelet its CNI files instead of
// --pod-cidrs, each agent a socket and store of its own.
func TestPodIPAMComponentArgs(t *testing.T) {
	p := newPaths("/run/lab")
	n := nodeSpec{Name: "node-2", PodCIDRs: nil}
	for _, mode := range []string{PodIPAMKubernetes, PodIPAMClusterPool, PodIPAMMultiPool} {
		c := &Config{PodIPAM: mode, Mooring: true}
		ctrl := controllerComponent(c, p).Args
		if !slices.Contains(ctrl, "--pod-ipam-mode="+mode) {
			t.Errorf("%s: controller %v", mode, ctrl)
		}
		if got := slices.Contains(ctrl, "--cluster-pool-ipv4-cidr=10.244.0.0/16"); got != (mode == PodIPAMClusterPool) {
			t.Errorf("%s: controller %v", mode, ctrl)
		}
		kcm := kcmComponent(c, p).Args
		if got := slices.Contains(kcm, "--allocate-node-cidrs"); got != (mode == PodIPAMKubernetes) {
			t.Errorf("%s: kube-controller-manager %v", mode, kcm)
		}
		if got := slices.Contains(kcm, "--controllers=endpointslice-controller,node-lifecycle-controller,node-ipam-controller"); got != (mode == PodIPAMKubernetes) {
			t.Errorf("%s: kube-controller-manager %v", mode, kcm)
		}
		kl := kubeletComponent(c, p, n).Args
		if !slices.Contains(kl, "--cni-conf=/run/lab/cni/node-2/10-mooring-lab.conflist") || slices.ContainsFunc(kl, func(a string) bool { return strings.HasPrefix(a, "--pod-cidrs") }) {
			t.Errorf("%s: kubelet %v", mode, kl)
		}
		ag := agentComponent(c, p, n).Args
		if !slices.Contains(ag, "--pod-ipam-socket=/run/lab/cni/node-2/ipamd.sock") || !slices.Contains(ag, "--pod-ipam-state-dir=/run/lab/cni/node-2/ipam") {
			t.Errorf("%s: agent %v", mode, ag)
		}
	}
	off := &Config{Mooring: true}
	if a := controllerComponent(off, p).Args; len(a) != 2 {
		t.Errorf("off: controller %v", a)
	}
	if a := agentComponent(off, p, n).Args; slices.ContainsFunc(a, func(s string) bool { return strings.HasPrefix(s, "--pod-ipam") }) {
		t.Errorf("off: agent %v", a)
	}
}

func TestPodIPAMValidate(t *testing.T) {
	dir := t.TempDir()
	for _, b := range append(slices.Clone(cniBinaries), "mooring-ipam") {
		if err := os.WriteFile(filepath.Join(dir, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	good := Config{PodIPAM: PodIPAMMultiPool, Mooring: true, CNIPlugins: dir, IPAMPlugin: filepath.Join(dir, "mooring-ipam"),
		Log: slog.Default(), Timeout: time.Minute}
	if err := good.validatePodIPAM(); err != nil {
		t.Fatalf("good: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"unknown mode":          func(c *Config) { c.PodIPAM = "calico" },
		"unknown network":       func(c *Config) { c.PodNetwork = "flannel" },
		"bridge and multi-pool": func(c *Config) { c.PodNetwork = PodNetworkBridge },
		"no Mooring":            func(c *Config) { c.Mooring = false },
		"no plugins":            func(c *Config) { c.CNIPlugins = t.TempDir() },
		"no mooring-ipam":       func(c *Config) { c.IPAMPlugin = "" },
	} {
		c := good
		mut(&c)
		err := c.validatePodIPAMFlags()
		if err == nil {
			err = c.validatePodIPAM()
		}
		if err == nil || !strings.HasPrefix(err.Error(), "lab: ") {
			t.Errorf("%s: %v", name, err)
		}
	}
	off := Config{PodIPAM: PodIPAMOff}
	if err := off.validatePodIPAM(); err != nil {
		t.Errorf("off needs nothing: %v", err)
	}
}

// kube-proxy tells pod traffic by the interface it comes in on whenever
// pods are wired through CNI (a multi-pool pool lies outside
// --cluster-cidr); the static wiring keeps --cluster-cidr alone.
func TestKubeProxyDetectsPodTrafficByInterface(t *testing.T) {
	for _, tc := range []struct {
		ipam, network string
		want          []string
	}{
		{"", "", nil},
		{PodIPAMMultiPool, PodNetworkPTP, []string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"}},
		{PodIPAMClusterPool, "", []string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"}},
		{PodIPAMKubernetes, PodNetworkBridge, []string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=mbr0"}},
	} {
		c := &Config{KubeBin: "/kb", PodIPAM: tc.ipam, PodNetwork: tc.network}
		args := kubeProxyComponent(c, newPaths("/run/x"), nodeSpec{Name: "node-1"}).Args
		var got []string
		for _, a := range args {
			if strings.HasPrefix(a, "--detect-local-mode") || strings.HasPrefix(a, "--pod-") {
				got = append(got, a)
			}
		}
		if !slices.Equal(got, tc.want) || !slices.Contains(args, "--cluster-cidr=10.244.0.0/16,fd00:244::/56") {
			t.Errorf("%s/%s: kube-proxy args %v, want %v beside --cluster-cidr", tc.ipam, tc.network, args, tc.want)
		}
		if tc.network == PodNetworkBridge && !strings.Contains(conflist(tc.network, "/s"), `"bridge":"mbr0"`) {
			t.Error("the bridge network's bridge is not the one kube-proxy watches")
		}
	}
}
