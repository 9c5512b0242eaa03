package lab

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab/echo"
	"github.com/mooringlb/mooring/internal/lab/kubelet"
)

// newKubeletCommand is the kubelet stand-in the lab runs in each node
// namespace (hidden: only the lab starts it).
func newKubeletCommand(deps *cliutil.Deps) *cobra.Command {
	var kubeconfig, nodeIPs, podCIDRs string
	var cni kubelet.CNIConfig
	var labels map[string]string
	cfg := kubelet.Config{LeaseInterval: time.Second, StatusInterval: 10 * time.Second}
	cmd := &cobra.Command{
		Use:    "kubelet",
		Short:  "The lab's kubelet stand-in (started by `lab up` inside a node namespace)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.NodeIPs, err = parseList(nodeIPs, netip.ParseAddr); err != nil {
				return fmt.Errorf("--node-ips: %w", err)
			}
			if cfg.PodCIDRs, err = parseList(podCIDRs, netip.ParsePrefix); err != nil {
				return fmt.Errorf("--pod-cidrs: %w", err)
			}
			rc, err := kube.RESTConfig(kubeconfig, 20, 40)
			if err != nil {
				return err
			}
			kube.BridgeLogs(deps.Log)
			if cfg.Client, err = kubernetes.NewForConfig(rc); err != nil {
				return err
			}
			if cfg.Self, err = os.Executable(); err != nil {
				return err
			}
			cfg.Log, cfg.Labels = deps.Log, labels
			if cni.ConfList != "" {
				cfg.CNI = &cni
			}
			return kubelet.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&kubeconfig, cliutil.KubeconfigFlag, "", cliutil.KubeconfigUsage)
	f.StringVar(&cfg.NodeName, "node-name", "", "name of the Node to register")
	f.StringVar(&nodeIPs, "node-ips", "", "the node's addresses, comma-separated, IPv4 first")
	f.StringVar(&podCIDRs, "pod-cidrs", "", "the node's pod CIDRs, comma-separated, IPv4 first")
	f.StringVar(&cfg.LogDir, "log-dir", "", "folder for the pods' logs")
	f.StringVar(&cni.ConfList, "cni-conf", "", "the pod network's CNI .conflist: set up every pod through libcni instead of --pod-cidrs")
	f.StringSliceVar(&cni.BinDirs, "cni-bin-dir", nil, "folders holding the CNI plugins, comma-separated")
	f.StringVar(&cni.CacheDir, "cni-cache-dir", "", "folder for libcni's cached results (kept across kubelet restarts for GC)")
	f.StringToStringVar(&labels, "node-labels", nil, "labels to add to the Node, k=v,k=v")
	f.DurationVar(&cfg.LeaseInterval, "lease-interval", cfg.LeaseInterval, "node Lease renewal period")
	f.DurationVar(&cfg.StatusInterval, "status-interval", cfg.StatusInterval, "node status update period")
	return cmd
}

// newEchoCommand is the lab's only pod image.
func newEchoCommand(deps *cliutil.Deps) *cobra.Command {
	cfg := echo.Config{Port: kubelet.DefaultPort}
	cmd := &cobra.Command{
		Use:    "echo",
		Short:  "HTTP server answering with its pod's and node's names (the lab's pod image)",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Log = deps.Log
			return echo.Run(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.Port, "port", cfg.Port, "TCP port to listen on (all addresses)")
	f.StringVar(&cfg.Pod, "pod", "", "pod name to report")
	f.StringVar(&cfg.Namespace, "namespace", "", "pod namespace to report")
	f.StringVar(&cfg.Node, "node", "", "node name to report")
	f.IntVar(&cfg.ReadyFD, "ready-fd", 0, "file descriptor to write one byte to once listening")
	return cmd
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}
