package lab

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	noMooring := false
	fault := ""
	cmd := &cobra.Command{
		Use:   "up",
		Short: "Bring the lab up and stay in the foreground (Ctrl-C removes everything)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			self, err := os.Executable()
			if err != nil {
				return err
			}
			cfg.Self, cfg.Log, cfg.StateDir, cfg.Mooring = self, deps.Log, *stateDir, !noMooring
			if cfg.KubeBin == "" {
				cfg.KubeBin = lab.FindKubeBin()
			}
			if cfg.CRDDir == "" {
				cfg.CRDDir = lab.FindCRDDir(self)
			}
			var flt lab.Fault
			if fault != "" {
				if flt, err = lab.ParseFault(fault); err != nil {
					return err
				}
			}
			return lab.Run(cmd.Context(), cfg, func(r *lab.Ready) {
				if err := r.Cluster.StartFault(cmd.Context(), flt); err != nil {
					deps.Log.Error("injecting the fault failed", "fault", fault, "err", err)
				}
				printReady(deps.Streams.Out, r, self, *stateDir)
			})
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Nodes, "nodes", cfg.Nodes, "number of node namespaces (2 or more)")
	f.StringVar(&cfg.KubeBin, "kubebin", "", "folder with etcd, kube-apiserver, kube-controller-manager and kube-proxy (default: $"+lab.EnvKubeBin+", else the current build of `make kubebin` under ~/.cache/mooring/kubebin)")
	f.StringVar(&cfg.CRDDir, "crds", "", "folder of Mooring's CRD manifests (default: config/crd of the repository)")
	f.DurationVar(&cfg.NodeMonitorGracePeriod, "node-monitor-grace-period", cfg.NodeMonitorGracePeriod, "how long a silent node stays Ready (Kubernetes' default is 50s)")
	f.DurationVar(&cfg.Timeout, "timeout", cfg.Timeout, "give up if the lab is not ready within this time")
	f.StringVar(&cfg.KeepLogs, "keep-logs", "", "on the way out, copy the components' logs into this folder")
	f.StringVar(&fault, "fault", "", "inject a data-plane fault once ready: slow-new-pods=DURATION[@NODE] (new pods on NODE, default the last, unreachable from other nodes for DURATION while Ready)")
	f.BoolVar(&noMooring, "no-mooring", false, "run no Mooring controller or agents (the Service then has only a ClusterIP)")
	return cmd
}

// printReady prints the lines the issue promises: KUBECONFIG=, the
// Service's address and a command that reaches it.
func printReady(w interface{ Write([]byte) (int, error) }, r *lab.Ready, self, stateDir string) {
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
	fmt.Fprintf(w, "Service %s/%s: %s port %d, %s\n", r.Service.Namespace, r.Service.Name,
		strings.Join(addrs, ", "), r.Service.Port, kind)
	fmt.Fprintf(w, "Try: %s lab exec %s -- curl -s %s\n", prog, r.From, r.URL)
	fmt.Fprintf(w, "Ready in %.1fs. Ctrl-C here or `%s lab down` removes everything.\n",
		r.Elapsed.Round(100*time.Millisecond).Seconds(), prog)
}
