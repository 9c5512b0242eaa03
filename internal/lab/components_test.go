package lab

import (
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestNodePodCIDRs(t *testing.T) {
	for _, tc := range []struct {
		i      int
		v4, v6 string
	}{{1, "10.244.1.0/24", "fd00:244:0:1::/64"}, {89, "10.244.89.0/24", "fd00:244:0:59::/64"}} {
		p4, p6 := nodePodCIDRs(tc.i)
		if p4.String() != tc.v4 || p6.String() != tc.v6 {
			t.Errorf("node %d: %s %s, want %s %s", tc.i, p4, p6, tc.v4, tc.v6)
		}
		if !ClusterCIDR4.Contains(p4.Addr()) || !ClusterCIDR6.Contains(p6.Addr()) {
			t.Errorf("node %d: pod CIDRs outside the cluster CIDRs", tc.i)
		}
	}
}

// The pool must stay out of every host's address and inside the lab link.
func TestPoolInsideLabLinkAndFree(t *testing.T) {
	link4, link6 := netip.MustParsePrefix("10.213.0.0/24"), netip.MustParsePrefix("fd00:213::/64")
	for _, a := range append(PoolRange4[:], PoolRange6[:]...) {
		if !link4.Contains(a) && !link6.Contains(a) {
			t.Errorf("pool bound %s is outside the lab link", a)
		}
	}
	if PoolRange4[0].As4()[3] < 100 || PoolRange4[1].As4()[3] > 199 {
		t.Errorf("IPv4 pool %v leaves offsets 100-199", PoolRange4)
	}
	if b := PoolRange6[0].As16(); b[14] == 0 {
		t.Errorf("IPv6 pool %v overlaps host offsets (< 256)", PoolRange6)
	}
}

func TestKubeProxyRunsNFTablesForItsNode(t *testing.T) {
	c := &Config{KubeBin: "/kb"}
	n := nodeSpec{Name: "node-2"}
	comp := kubeProxyComponent(c, newPaths("/run/x"), n)
	for _, want := range []string{"--proxy-mode=nftables", "--hostname-override=node-2", "--conntrack-max-per-core=0",
		"--kubeconfig=/run/x/cluster.kubeconfig", "--cluster-cidr=10.244.0.0/16,fd00:244::/56"} {
		if !slices.Contains(comp.Args, want) {
			t.Errorf("kube-proxy args %v lack %s", comp.Args, want)
		}
	}
	if comp.Host != "node-2" || comp.Path != "/kb/kube-proxy" {
		t.Errorf("kube-proxy runs %s in %s", comp.Path, comp.Host)
	}
}

func TestControllerManagerGracePeriod(t *testing.T) {
	comp := kcmComponent(&Config{KubeBin: "/kb", NodeMonitorGracePeriod: 7 * time.Second}, newPaths("/run/x"))
	if !slices.Contains(comp.Args, "--node-monitor-grace-period=7s") ||
		!slices.Contains(comp.Args, "--controllers=endpointslice-controller,node-lifecycle-controller") {
		t.Errorf("kube-controller-manager args %v", comp.Args)
	}
}

func TestComponentLogNames(t *testing.T) {
	if got := logName("kubelet/node-1"); got != "kubelet-node-1.log" {
		t.Errorf("logName = %q", got)
	}
}

func TestHostURL(t *testing.T) {
	for in, want := range map[string]string{
		"10.213.0.100":  "http://10.213.0.100/",
		"fd00:213::100": "http://[fd00:213::100]/",
	} {
		if got := hostURL(in, 80); got != want {
			t.Errorf("hostURL(%s) = %s, want %s", in, got, want)
		}
	}
	if got := hostURL("fd00::1", 8080); got != "http://[fd00::1]:8080/" {
		t.Errorf("hostURL with port = %s", got)
	}
}

func TestConfigValidate(t *testing.T) {
	dir := t.TempDir()
	kb := filepath.Join(dir, "kb")
	crds := filepath.Join(dir, "crd")
	for _, d := range []string{kb, crds} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, b := range kubeBinaries {
		if err := os.WriteFile(filepath.Join(kb, b), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(crds, "x.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	good := Config{Nodes: 3, StateDir: "/run/x", KubeBin: kb, CRDDir: crds, Self: "/bin/true",
		NodeMonitorGracePeriod: 20 * time.Second, Timeout: time.Minute, Log: slog.Default()}
	if err := good.Validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for name, mut := range map[string]func(*Config){
		"one node":      func(c *Config) { c.Nodes = 1 },
		"relative dir":  func(c *Config) { c.StateDir = "lab" },
		"no kubebin":    func(c *Config) { c.KubeBin = dir },
		"no crds":       func(c *Config) { c.CRDDir = dir },
		"short grace":   func(c *Config) { c.NodeMonitorGracePeriod = time.Second },
		"no executable": func(c *Config) { c.Self = "" },
		"bgp without a speaker": func(c *Config) {
			c.BGP.Enabled, c.Mooring = true, false
		},
		"bgp with mooring from the chart": func(c *Config) {
			c.BGP.Enabled, c.Mooring, c.Install = true, true, InstallChart
		},
	} {
		c := good
		mut(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		} else if !strings.HasPrefix(err.Error(), "lab: ") {
			t.Errorf("%s: error %q does not say where it comes from", name, err)
		}
	}
}

func TestClaimDirRefusesForeignFolders(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := claimDir(dir); err == nil {
		t.Fatal("claimDir took over a folder holding no lab state")
	}
	// A dead lab's leftovers are swept.
	dead := filepath.Join(t.TempDir(), "lab")
	if err := os.MkdirAll(filepath.Join(dead, "logs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := writeState(filepath.Join(dead, "state.json"), &State{PID: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := claimDir(dead); err != nil {
		t.Fatalf("claimDir on a dead lab's dir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dead, "state.json")); !os.IsNotExist(err) {
		t.Fatalf("dead lab's state survived: %v", err)
	}
}

// The BGP lab turns the agents' speaker on, with MetalLB too (no BGPPeer
// selects a node until `migrate metallb` hands it over); in the L2 lab
// the agents run without it.
func TestBGPAgentArgs(t *testing.T) {
	for _, tt := range []struct {
		cfg  Config
		want bool
	}{
		{Config{Mooring: true, BGP: BGPConfig{Enabled: true}}, true},
		{Config{Mooring: true, MetalLB: "/m", BGP: BGPConfig{Enabled: true}}, true},
		{Config{Mooring: true, MetalLB: "/m"}, false},
		{Config{Mooring: true}, false},
	} {
		comp := agentComponent(&tt.cfg, paths{}, nodeSpec{Name: "node-1"})
		if got := slices.Contains(comp.Args, "--bgp"); got != tt.want {
			t.Errorf("%+v: --bgp in the agent's args %v, want %v", tt.cfg.BGP, got, tt.want)
		}
	}
}

// The controller, which exits when it loses its Lease to a hung API
// server, is restarted as a Deployment's pod would be; nothing else is.
func TestOnlyTheControllerRestarts(t *testing.T) {
	c := &Config{Mooring: true, Nodes: 1}
	p := newPaths("/run/lab")
	if !controllerComponent(c, p).Restart {
		t.Error("the controller is not restarted")
	}
	n := nodeSpec{Name: "node-1"}
	for _, comp := range []component{agentComponent(c, p, n), kubeProxyComponent(c, p, n), kcmComponent(c, p)} {
		if comp.Restart {
			t.Errorf("%s is restarted: a test that kills it would see it come back", comp.Name)
		}
	}
}
