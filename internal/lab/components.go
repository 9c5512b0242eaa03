package lab

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// component is one process of the lab: what to run, and in which host.
// Building them is pure (paths and flags only) so the command lines can be
// read in one place and tested without namespaces.
type component struct {
	Name string // unique: "etcd", "kubelet/node-1", ...
	Host string // netlab host name: "control-plane", "node-1", ...
	Path string
	Args []string
	Env  []string // added to the lab's environment
	Dir  string   // working directory; "" is the lab's
	// Restart starts it again after it exits on its own, as a
	// Deployment's pod is restarted (Cluster.restart: 2 s, backing off
	// to 30 s while it keeps exiting).
	Restart bool
}

// paths is the layout of the state dir.
type paths struct {
	Dir            string
	State          string // state.json
	Control        string // control socket
	PKI            string
	Logs           string
	Bin            string // kubectl, for $PATH
	Etcd           string
	Kubeconfig     string // admin, via the host's forwarder (127.0.0.1)
	ClusterKubecfg string // admin, for processes inside the lab (10.213.0.2)
	GossipKey      string // the agents' gossip key file (one key)
	AgentState     string // the agents' --state-dir, one folder per node
}

func newPaths(dir string) paths {
	return paths{
		Dir:            dir,
		State:          filepath.Join(dir, "state.json"),
		Control:        filepath.Join(dir, "control.sock"),
		PKI:            filepath.Join(dir, "pki"),
		Logs:           filepath.Join(dir, "logs"),
		Bin:            filepath.Join(dir, "bin"),
		Etcd:           filepath.Join(dir, "etcd"),
		Kubeconfig:     filepath.Join(dir, "kubeconfig"),
		ClusterKubecfg: filepath.Join(dir, "cluster.kubeconfig"),
		GossipKey:      filepath.Join(dir, "gossip", "keys"),
		AgentState:     filepath.Join(dir, "agent-state"),
	}
}

// writeGossipKey writes a fresh gossip key for the lab's agents, as the
// chart's Secret holds one: they gossip encrypted, as a default install.
func writeGossipKey(p paths) error {
	key, err := newGossipKey()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p.GossipKey), 0o700); err != nil {
		return err
	}
	return os.WriteFile(p.GossipKey, []byte(key+"\n"), 0o600)
}

// controlPlaneHost is the netlab host holding etcd, the apiserver,
// kube-controller-manager and the Mooring controller, like kind's
// control-plane node (but it is not a Node: nothing is scheduled there).
const controlPlaneHost = "control-plane"

func etcdComponent(c *Config, p paths) component {
	return component{
		Name: "etcd", Host: controlPlaneHost,
		Path: filepath.Join(c.KubeBin, "etcd"),
		Args: []string{
			"--name=lab",
			"--data-dir=" + p.Etcd,
			"--listen-client-urls=http://127.0.0.1:2379",
			"--advertise-client-urls=http://127.0.0.1:2379",
			"--listen-peer-urls=http://127.0.0.1:2380",
			"--initial-advertise-peer-urls=http://127.0.0.1:2380",
			"--initial-cluster=lab=http://127.0.0.1:2380",
			// The lab's data dies with it; fsync would only slow start-up.
			"--unsafe-no-fsync",
			"--log-level=warn",
		},
	}
}

func apiserverComponent(c *Config, p paths, k *pki, cp4 netip.Addr) component {
	return component{
		Name: "kube-apiserver", Host: controlPlaneHost,
		Path: filepath.Join(c.KubeBin, "kube-apiserver"),
		Args: []string{
			"--etcd-servers=http://127.0.0.1:2379",
			"--bind-address=::", // both families, inside the control-plane namespace only
			fmt.Sprintf("--secure-port=%d", APIServerPort),
			"--advertise-address=" + cp4.String(),
			"--tls-cert-file=" + k.ServerCert,
			"--tls-private-key-file=" + k.ServerKey,
			"--cert-dir=" + filepath.Join(p.PKI, "apiserver"),
			"--token-auth-file=" + k.TokenFile,
			"--authorization-mode=RBAC",
			"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
			"--service-account-key-file=" + k.SAPub,
			"--service-account-signing-key-file=" + k.SAKey,
			"--service-cluster-ip-range=" + ServiceCIDR4.String() + "," + ServiceCIDR6.String(),
			// Pods would wait for a default ServiceAccount that only the
			// serviceaccount controller creates, and the echo pods use no
			// token: the plugin buys the lab nothing.
			"--disable-admission-plugins=ServiceAccount",
			// Priority and fairness costs CPU on a 2-core machine and matters
			// only under overload.
			"--enable-priority-and-fairness=false",
			"--profiling=false",
			"--allow-privileged=true",
		},
	}
}

func kcmComponent(c *Config, p paths) component {
	return component{
		Name: "kube-controller-manager", Host: controlPlaneHost,
		Path: filepath.Join(c.KubeBin, "kube-controller-manager"),
		Args: append([]string{
			"--kubeconfig=" + p.ClusterKubecfg,
			"--controllers=" + kcmControllers(c),
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			"--secure-port=0",
			"--concurrent-service-endpoint-syncs=5",
			fmt.Sprintf("--node-monitor-grace-period=%s", c.NodeMonitorGracePeriod),
			// Kubernetes checks every 5 s; 1 s keeps the phase-2 measurement
			// from being quantised by the check period.
			"--node-monitor-period=1s",
		}, append(podIPAMKCMArgs(c), realNodeKCMArgs(c, p)...)...),
	}
}

// schedulerComponent runs kube-scheduler next to the apiserver, so that
// pods created without spec.nodeName land on a node (the demo pods are
// bound by name and do not need it).
func schedulerComponent(c *Config, p paths) component {
	return component{
		Name: "kube-scheduler", Host: controlPlaneHost,
		Path: filepath.Join(c.KubeBin, "kube-scheduler"),
		Args: []string{
			"--kubeconfig=" + p.ClusterKubecfg,
			"--leader-elect=false",
			"--secure-port=0",
		},
	}
}

// nodeSpec is one node's plan: its name, addresses and pod CIDRs.
type nodeSpec struct {
	Name     string
	Addrs    []netip.Addr   // eth0: IPv4, IPv6
	PodCIDRs []netip.Prefix // IPv4, IPv6
	Labels   map[string]string
}

func kubeletComponent(c *Config, p paths, n nodeSpec) component {
	args := []string{
		"lab", "kubelet",
		"--kubeconfig=" + p.ClusterKubecfg,
		"--node-name=" + n.Name,
		"--node-ips=" + joinAddrs(n.Addrs),
		"--log-dir=" + p.Logs,
		"--node-labels=" + joinLabels(n.Labels),
	}
	if c.usesPodIPAM() {
		args = append(args, podIPAMKubeletArgs(p, n.Name)...)
	} else {
		args = append(args, "--pod-cidrs="+joinPrefixes(n.PodCIDRs))
	}
	args = append(args, chartKubeletArgs(c, p)...)
	return component{Name: "kubelet/" + n.Name, Host: n.Name, Path: c.Self, Args: args, Env: c.SelfEnv}
}

func kubeProxyComponent(c *Config, p paths, n nodeSpec) component {
	return component{
		Name: "kube-proxy/" + n.Name, Host: n.Name,
		Path: filepath.Join(c.KubeBin, "kube-proxy"),
		Args: slices.Concat([]string{
			"--kubeconfig=" + p.ClusterKubecfg,
			"--hostname-override=" + n.Name,
			"--proxy-mode=nftables",
			"--cluster-cidr=" + ClusterCIDR4.String() + "," + ClusterCIDR6.String(),
		}, kubeProxyLocalArgs(c), []string{
			// nf_conntrack_max and the conntrack timeouts are not
			// namespaced: a node namespace may not write them, so leave
			// the machine's values alone.
			"--conntrack-max-per-core=0",
			"--conntrack-tcp-timeout-established=0",
			"--conntrack-tcp-timeout-close-wait=0",
			"--metrics-bind-address=127.0.0.1:10249",
			"--healthz-bind-address=127.0.0.1:10256",
			"--oom-score-adj=0",
		}),
	}
}

// kubeProxyLocalArgs say how kube-proxy tells pod traffic (never
// masqueraded to a Service) from the rest. The static wiring and the
// kubernetes and cluster-pool modes keep every pod inside --cluster-cidr,
// but multi-pool pools lie anywhere: a pod of a second pool would reach
// Services masqueraded, its backends seeing the node's address. So with
// CNI, traffic is local by the interface it comes in on, as CNI-agnostic
// as kube-proxy allows: the bridge for the bridge network, and for ptp
// every host-side veth ("veth" + 8 hex, the reference plugins' names; the
// node's own link is eth0).
func kubeProxyLocalArgs(c *Config) []string {
	switch {
	case !c.usesPodIPAM():
		return nil
	case c.PodNetwork == PodNetworkBridge:
		return []string{"--detect-local-mode=BridgeInterface", "--pod-bridge-interface=" + podBridge}
	}
	return []string{"--detect-local-mode=InterfaceNamePrefix", "--pod-interface-name-prefix=veth"}
}

// controllerComponent runs `mooring controller` next to the apiserver.
func controllerComponent(c *Config, p paths) component {
	comp := component{
		// It exits when it cannot renew its leader-election Lease (an
		// API server that hangs): a Deployment would restart it.
		Restart: true,
		Name:    "mooring-controller", Host: controlPlaneHost,
		Path: c.Self,
		Args: append([]string{
			"controller",
			"--kubeconfig=" + p.ClusterKubecfg,
		}, podIPAMControllerArgs(c)...),
		Env: c.SelfEnv,
	}
	if c.MetalLB != "" {
		// MetalLB still serves the Services: Mooring only adopts.
		comp.Args = append(comp.Args, "--adopt-only")
	}
	return comp
}

// agentComponent runs `mooring agent` in a node namespace, with what the
// chart's DaemonSet gives it (docs/install.md lists what still differs,
// and internal/chart's TestChartDefaultsMatchTheLab checks that list): the
// node's address for gossip, a gossip key file, a state folder that
// outlives the process (the chart's hostPath), and the chart's defaults.
func agentComponent(c *Config, p paths, n nodeSpec) component {
	bind := "0.0.0.0"
	if len(n.Addrs) > 0 {
		bind = n.Addrs[0].String()
	}
	return component{
		Name: "mooring-agent/" + n.Name, Host: n.Name,
		Path: c.Self,
		Args: append(append([]string{
			"agent",
			"--kubeconfig=" + p.ClusterKubecfg,
			"--node-name=" + n.Name,
			"--gossip-bind-address=" + bind,
			"--gossip-key-file=" + p.GossipKey,
			"--state-dir=" + filepath.Join(p.AgentState, n.Name),
			// Phase 2 in about a second: a dead node's pods leave their
			// Services when the agents confirm its death, not after the
			// node-monitor grace period (the chart's default too).
			"--fast-endpoint-eviction",
		}, agentLogLevel()...), append(bgpAgentArgs(c), podIPAMAgentArgs(c, p, n.Name)...)...),
		Env: append(slices.Clone(c.SelfEnv), agentEnv()...),
	}
}

// AgentGoMemLimit is the chart's agent.goMemLimit default; the lab's
// agents run with it too, so that what the lab measures is what a default
// install runs (internal/chart's TestChartDefaultsMatchTheLab compares
// them). A GOMEMLIMIT in the lab's own environment wins (a benchmark of
// another limit).
const AgentGoMemLimit = "48MiB"

// agentEnv is the environment the lab adds to an agent's, as the chart's
// DaemonSet sets it.
func agentEnv() []string {
	if _, set := os.LookupEnv("GOMEMLIMIT"); set {
		return nil
	}
	return DefaultAgentEnv()
}

// DefaultAgentEnv is the environment the lab gives its agents when its
// own sets none of it.
func DefaultAgentEnv() []string { return []string{"GOMEMLIMIT=" + AgentGoMemLimit} }

// EnvAgentLogLevel sets the lab's agents' --log-level (default info):
// debug logs, among others, every gossip metadata change each agent sees.
const EnvAgentLogLevel = "MOORING_LAB_AGENT_LOG_LEVEL"

func agentLogLevel() []string {
	if v := os.Getenv(EnvAgentLogLevel); v != "" {
		return []string{"--log-level=" + v}
	}
	return nil
}

// command builds the exec.Cmd for comp, logging into logs/<name>.log.
func (comp component) command(logs string) (*exec.Cmd, *os.File, error) {
	logPath := filepath.Join(logs, logName(comp.Name))
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, nil, err
	}
	cmd := exec.Command(comp.Path, comp.Args...)
	cmd.Env = append(os.Environ(), comp.Env...)
	cmd.Dir = comp.Dir
	cmd.Stdout, cmd.Stderr = f, f
	return cmd, f, nil
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ",")
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// logName is the file under logs/ that a component writes to.
func logName(name string) string { return strings.ReplaceAll(name, "/", "-") + ".log" }

// hostURL is the URL of ip:port, with no port for 80.
func hostURL(ip string, port int) string {
	if port == 80 {
		if a, err := netip.ParseAddr(ip); err == nil && a.Is6() {
			return "http://[" + ip + "]/"
		}
		return "http://" + ip + "/"
	}
	return "http://" + net.JoinHostPort(ip, strconv.Itoa(port)) + "/"
}

// joinLabels renders labels as k=v,k=v in key order.
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

// DefaultCommands are the command lines (after the binary) a default lab
// (`lab up`: 3 nodes, lab processes) runs the Mooring controller and
// node-1's agent with, and the node's IPv4 address (its --gossip-bind-
// address). internal/chart compares them with the chart's defaults.
func DefaultCommands() (controller, agent []string, nodeAddr string) {
	c := &Config{Nodes: DefaultNodes, Mooring: true}
	p := newPaths(DefaultStateDir)
	n := nodeSpec{Name: "node-1", Addrs: []netip.Addr{netip.MustParseAddr("10.213.0.11"), netip.MustParseAddr("fd00:213::11")}}
	return controllerComponent(c, p).Args, agentComponent(c, p, n).Args, n.Addrs[0].String()
}

// bgpAgentArgs turn the agents' BGP speaker on in the BGP lab. With
// MetalLB, whose speakers peer with the router, the lab creates no
// BGPPeer: the agents peer once `mooring migrate metallb` applies the
// imported ones and hands each node over.
func bgpAgentArgs(c *Config) []string {
	if c.BGP.Enabled {
		return []string{"--bgp"}
	}
	return nil
}

// bgpChartArgs turn the speaker on through the chart as a user does
// (agent.flags.bgp, which also binds the mooring-agent-bgp role); the
// password Secret stays in the release namespace, where the chart's
// agents read it.
func bgpChartArgs(c *Config) []string {
	if c.BGP.Enabled {
		return []string{"--set", "agent.flags.bgp=true"}
	}
	return nil
}
