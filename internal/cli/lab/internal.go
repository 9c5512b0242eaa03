package lab

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
			if cfg.MooringImage != "" {
				if cfg.CACert, err = clusterCA(rc); err != nil {
					return err
				}
			}
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
	f.StringVar(&cfg.MooringImage, "mooring-image", "", "run the pods of this image repository with this mooring binary (the lab's chart install: "+kubelet.MooringImage+")")
	f.StringVar(&cfg.PodsDir, "pods-dir", "", "folder for the files of those pods (tokens, volumes)")
	f.StringArrayVar(&cfg.PodEnv, "pod-env", nil, "KEY=VALUE added to those pods' environment (repeatable)")
	f.DurationVar(&cfg.LeaseInterval, "lease-interval", cfg.LeaseInterval, "node Lease renewal period")
	f.DurationVar(&cfg.StatusInterval, "status-interval", cfg.StatusInterval, "node status update period")
	return cmd
}

// clusterCA is the CA of the kubeconfig's cluster: what pods get as
// ca.crt.
func clusterCA(rc *rest.Config) ([]byte, error) {
	if len(rc.CAData) > 0 {
		return rc.CAData, nil
	}
	if rc.CAFile == "" {
		return nil, fmt.Errorf("the kubeconfig names no cluster CA: pods could not verify the apiserver")
	}
	return os.ReadFile(rc.CAFile)
}

// newPodRunCommand is the supervisor of one pod of Mooring's image (hidden:
// the kubelet stand-in starts it in the pod's namespaces).
func newPodRunCommand(deps *cliutil.Deps) *cobra.Command {
	var rw, ro []string
	cfg := kubelet.PodRunConfig{}
	cmd := &cobra.Command{
		Use:    "pod-run",
		Short:  "Run one container of a lab pod: its mounts, then the command the kubelet sends, restarted when it exits",
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var err error
			if cfg.Binds, err = kubelet.ParseBinds(rw, ro); err != nil {
				return err
			}
			cfg.Log = deps.Log
			return kubelet.PodRun(cmd.Context(), cfg)
		},
	}
	f := cmd.Flags()
	f.IntVar(&cfg.ReadyFD, "ready-fd", 3, "file descriptor to write one byte to once the mounts are made")
	f.IntVar(&cfg.GoFD, "go-fd", 4, "file descriptor to read the container (JSON: argv, env) from before starting it")
	f.StringVar(&cfg.Scratch, "scratch", "", "empty folder for the pod's scratch tmpfs")
	f.BoolVar(&cfg.OwnNetNS, "own-netns", false, "the pod has a network namespace of its own")
	f.StringVar(&cfg.Workdir, "workdir", "", "the command's working directory (default /)")
	f.StringArrayVar(&rw, "bind", nil, "SOURCE=TARGET bind mount (repeatable)")
	f.StringArrayVar(&ro, "bind-ro", nil, "SOURCE=TARGET read-only bind mount (repeatable)")
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
