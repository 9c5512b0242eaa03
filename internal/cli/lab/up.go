package lab

import (
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/lab"
)

func newUpCommand(deps *cliutil.Deps, stateDir *string) *cobra.Command {
	cfg := lab.Config{
		Nodes:                  lab.DefaultNodes,
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod,
		Timeout:                lab.DefaultTimeout,
	}
	noMooring, metallb := false, false
	var bgpPassword string
	fault := ""
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up and stay in the foreground (Ctrl-C removes everything)",
		Long: `lab up builds the whole lab on this machine and stays in the foreground. It needs root
(it creates network namespaces, veths and nftables rules, and runs kube-proxy), the
Kubernetes binaries of ` + "`make kubebin`" + ` and the nft tool (` + "`make deps`" + `).

Once the demo Service answers through its address it prints, on standard output:
  KUBECONFIG=<path>                     the admin kubeconfig (127.0.0.1, verified TLS)
  kubectl: export ...                   how to use the kubectl built with the control plane
  Service default/echo: <addresses> ... the Service's LoadBalancer addresses (or ClusterIPs)
  Try: mooring lab exec client -- curl -s http://<address>/
  Ready in <seconds>s. ...
Progress and warnings go to standard error.

Ctrl-C, SIGTERM or ` + "`mooring lab down`" + ` removes everything it made (processes, namespaces,
the state dir), also when its output has gone away (e.g. ` + "`make demo | tee log`" + ` interrupted).`,
		Example: `  sudo bin/mooring lab up
  sudo bin/mooring lab up --nodes 5 --node-monitor-grace-period 50s
  sudo bin/mooring lab up --no-mooring      # a bench for another LoadBalancer implementation
  sudo bin/mooring lab up --metallb         # MetalLB serves; Mooring only adopts (to try mooring migrate metallb run)
  sudo bin/mooring lab up --bgp             # Mooring's agents peer with a router (FRR, BFD, TCP-MD5); the client sits behind it
  sudo bin/mooring lab up --bgp --metallb   # MetalLB's native BGP speakers peer with the router instead
  sudo bin/mooring lab up --pod-ipam multi-pool   # pods set up through CNI with mooring-ipam
  sudo bin/mooring lab up --install=chart   # Mooring from its Helm chart, its pods run by the lab's nodes
  sudo bin/mooring lab up --runtime=containerd --install=chart   # real kubelets and containerd run the chart's pods
  sudo bin/mooring lab up --runtime=containerd --install=chart --pod-ipam=cluster-pool   # and pods get addresses from mooring-ipam`,
		Args: cobra.NoArgs,
		// Flag mistakes are usage errors (exit 2), found before anything
		// is built or looked for.
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			if fault != "" {
				var err error
				if cfg.Fault, err = lab.ParseFault(fault); err != nil {
					return cliutil.UsageError{Err: err}
				}
			}
			if f := cmd.Flags().Lookup("bgp-password"); f.Changed {
				// Given: that key, or "" for none; left out: the lab's.
				cfg.BGP.Password, cfg.BGP.NoPassword = bgpPassword, bgpPassword == ""
			}
			check := cfg
			check.Mooring = !noMooring
			if metallb {
				check.MetalLB = "--metallb"
			}
			if err := check.ValidateFlags(); err != nil {
				return cliutil.UsageError{Err: err}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The lab must tear down whatever happens to its output: with
			// SIGPIPE caught, a write to a closed pipe fails with EPIPE (and
			// is dropped) instead of killing the process half-way. Caught,
			// not ignored: an ignored signal would stay ignored in every
			// program the lab starts.
			sigpipe := make(chan os.Signal, 1)
			signal.Notify(sigpipe, syscall.SIGPIPE)
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Self, cfg.Log, cfg.StateDir, cfg.Mooring = self, deps.Log, *stateDir, !noMooring
			if err := findTools(&cfg, self, metallb); err != nil {
				return err
			}
			if err := fillRuntime(&cfg, self); err != nil {
				return err
			}
			return lab.Run(cmd.Context(), cfg, func(r *lab.Ready) {
				printReady(deps.Streams.Out, r, self, *stateDir)
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "number of node namespaces (2 or more)")
	f.StringVar(&cfg.KubeBin, "kubebin", "", "folder with etcd, kube-apiserver, kube-controller-manager, kube-proxy and kubectl (default: $"+lab.EnvKubeBin+", else the current \"make kubebin\" build under ~/.cache/mooring/kubebin)")
	f.StringVar(&cfg.CRDDir, "crds", "", "folder of Mooring's CRD manifests (default: config/crd of the repository)")
	f.DurationVar(&cfg.NodeMonitorGracePeriod, "node-monitor-grace-period", cfg.NodeMonitorGracePeriod, "how long a silent node stays Ready (Kubernetes' default is 50s)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up if the lab is not ready within this time")
	f.StringVar(&cfg.KeepLogs, "keep-logs", "", "on the way out, copy the components' logs into this folder")
	f.StringVar(&fault, "fault", "", "inject a data-plane fault once ready: slow-new-pods=DURATION[@NODE] (new pods on NODE, default the last, unreachable from other nodes for DURATION while Ready), or responder-open[@NODE] (NODE's agent, default the one announcing the demo Service, restarts and cannot open its ARP/NDP sockets: it retries in a loop while it runs); an unknown NODE is a usage error")
	f.StringVar(&cfg.Install, "install", "", "how Mooring is installed: \"\" runs the controller and agents as lab processes; \"chart\" renders charts/mooring with helm, applies it, and the nodes run its pods with this binary")
	f.StringVar(&cfg.Helm, "helm", "", "helm binary for --install=chart (default: $"+lab.EnvHelm+"/helm, else the current \"make helm\" build, else helm on $PATH)")
	f.StringVar(&cfg.ChartDir, "chart", "", "the chart for --install=chart (default: charts/mooring of the repository)")
	f.BoolVar(&metallb, "metallb", false, "also run the real MetalLB (built by make metallb): its controller and a speaker per node serve the demo Service from its IPAddressPool; with Mooring, Mooring's controller runs --adopt-only and no Mooring pool or policy is created")
	f.StringVar(&cfg.PodIPAM, "pod-ipam", lab.PodIPAMOff, "pod addresses: off (the lab's own static ones; needs no CNI plugins), or kubernetes, cluster-pool or multi-pool: every pod set up through libcni with the ptp (or bridge), loopback and mooring-ipam plugins, in that Mooring pod IPAM mode; with --runtime=containerd (needs --install=chart) containerd runs them and the chart's install-cni brings mooring-ipam")
	f.StringVar(&cfg.PodNetwork, "pod-network", lab.PodNetworkPTP, "with --pod-ipam: the main CNI plugin, ptp or bridge (the reference bridge plugin holds one IPv4 gateway per bridge: a node with a second block, e.g. in multi-pool, needs ptp)")
	f.StringVar(&cfg.CNIPlugins, "cni-plugins", "", "with --pod-ipam: folder with the bridge, ptp and loopback plugins (default: $"+lab.EnvCNIPlugins+", else the newest hack/cniplugins build under ~/.cache/mooring/cniplugins)")
	f.StringVar(&cfg.IPAMPlugin, "ipam-plugin", "", "with --pod-ipam: the mooring-ipam plugin (default: mooring-ipam beside this executable, where make build puts it)")
	addRuntimeFlags(f, &cfg)
	f.BoolVar(&cfg.BGP.Enabled, "bgp", false, "the BGP lab: a router namespace on the nodes' segment running FRR (bgpd, bfdd, zebra; make deps) that every node may peer with, and the client behind it, reaching Service addresses only through the router's ECMP routes. Mooring's agents peer with it (a BGPPeer with BFD 300 ms x 3 and a TCP-MD5 password, and a BGPAdvertisement of the demo pool, no L2 policy); with --metallb MetalLB's native BGP speakers do")
	f.DurationVar(&cfg.BGP.HoldTime, "bgp-hold-time", 0, "with --bgp: the hold time the nodes' speakers propose (default: the speaker's own, 9s for Mooring, 90s for MetalLB)")
	f.BoolVar(&cfg.BGP.BFD, "bgp-bfd", true, "with --bgp and Mooring's agents: BFD 300 ms x 3 between the nodes and the router (a BFDProfile on the BGPPeer, BFD on the router's neighbours); --bgp-bfd=false leaves failure detection to the hold time")
	f.StringVar(&bgpPassword, "bgp-password", lab.DefaultBGPPassword, "with --bgp and Mooring's agents: the TCP-MD5 password of every session between the nodes and the router (the router requires it from the nodes' addresses, a Secret in mooring-system holds it and the BGPPeer names the Secret); --bgp-password= leaves TCP-MD5 out")
	f.BoolVar(&noMooring, "no-mooring", false, "run no Mooring controller or agents and create the demo Service without loadBalancerClass, so that another implementation can serve it (until then it has only a ClusterIP)")
	return cmd
}

// findTools fills in the folders and programs the flags left out.
func findTools(cfg *lab.Config, self string, metallb bool) error {
	if cfg.KubeBin == "" {
		cfg.KubeBin = lab.FindKubeBin()
	}
	if cfg.CRDDir == "" {
		cfg.CRDDir = lab.FindCRDDir(self)
	}
	if cfg.Install == lab.InstallChart {
		if cfg.Helm == "" {
			cfg.Helm = lab.FindHelm()
		}
		if cfg.ChartDir == "" {
			cfg.ChartDir = lab.FindChartDir(self)
		}
	}
	if metallb {
		if cfg.MetalLB = lab.FindMetalLB(); cfg.MetalLB == "" {
			return fmt.Errorf("--metallb: MetalLB is not built: run `make metallb` (or set %s to the folder it prints)", lab.EnvMetalLB)
		}
	}
	if cfg.PodIPAM != "" && cfg.PodIPAM != lab.PodIPAMOff {
		if cfg.CNIPlugins == "" {
			cfg.CNIPlugins = lab.FindCNIPlugins()
		}
		if cfg.IPAMPlugin == "" {
			cfg.IPAMPlugin = lab.FindIPAMPlugin(self)
		}
	}
	return nil
}

// printReady prints the lines `lab up --help` promises. Write errors are
// ignored: the reader may be gone, and the lab stays up regardless.
func printReady(w io.Writer, r *lab.Ready, self, stateDir string) {
	prog := self
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, self); err == nil && !strings.HasPrefix(rel, "..") {
			prog = rel
		}
	}
	if stateDir != lab.DefaultStateDir {
		prog = lab.EnvStateDir + "=" + stateDir + " " + prog
	}
	addrs := r.Service.Ingress
	kind := "LoadBalancer"
	if len(addrs) == 0 {
		addrs, kind = r.Service.ClusterIP, "ClusterIP (no LoadBalancer address: Mooring is not running)"
	}
	fmt.Fprintf(w, "KUBECONFIG=%s\n", r.Kubeconfig)
	if r.KubectlDir != "" {
		fmt.Fprintf(w, "kubectl: export KUBECONFIG=%s PATH=%s:$PATH   (kubectl v1.37.2, as the apiserver)\n", r.Kubeconfig, r.KubectlDir)
	}
	fmt.Fprintf(w, "Service %s/%s: %s port %d, %s\n", r.Service.Namespace, r.Service.Name,
		strings.Join(addrs, ", "), r.Service.Port, kind)
	fmt.Fprintf(w, "Try: %s lab exec %s -- curl -s %s\n", prog, r.From, r.URL)
	fmt.Fprintf(w, "Ready in %.1fs. Ctrl-C here or `%s lab down` removes everything.\n",
		r.Elapsed.Round(100*time.Millisecond).Seconds(), prog)
}
