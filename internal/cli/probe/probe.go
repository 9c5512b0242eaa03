// Package probe is the `mooring probe` verb; `probe new-pod` times fresh
// pods' first successful request across nodes (internal/probe).
package probe

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab/kubelet"
	"github.com/mooringlb/mooring/internal/probe"
)

// NewCommand builds `mooring probe`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	cmd := &cobra.Command{Use: "probe", Short: "Measure the data plane as a workload sees it"}
	cmd.AddCommand(newPodCommand(deps))
	return cmd
}

type options struct {
	kubeconfig, namespace, image, via, output string
	nodes                                     []string
	pairs, rounds, port                       int
	timeout, interval, reqTimeout, threshold  time.Duration
	imageSet                                  bool
}

func newPodCommand(deps *cliutil.Deps) *cobra.Command {
	o := options{namespace: "default", image: "registry.k8s.io/e2e-test-images/agnhost:2.53", via: "auto", output: "table",
		pairs: 1, rounds: 5, port: 8080, timeout: 60 * time.Second, interval: 50 * time.Millisecond,
		reqTimeout: 500 * time.Millisecond, threshold: time.Second}
	cmd := &cobra.Command{
		Use:   "new-pod",
		Short: "Create fresh pod pairs on two nodes and time each pod's Ready -> first successful request to its partner",
		Long: "Every component can say Ready while NEW pods stay unreachable for seconds (seed 004). new-pod creates pairs of fresh pods\n" +
			"on two nodes, waits for Ready, then requests from inside each pod to its partner every --interval until one succeeds.\n" +
			"It prints every sample and p50/p99/max, deletes its pods even on Ctrl-C, and exits 1 when any sample exceeds --threshold.",
		Args:    cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { return o.validate() },
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.RESTConfig(o.kubeconfig, 20, 40)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			o.imageSet = cmd.Flags().Changed("image")
			return Run(cmd.Context(), o, cs, deps, deps.Streams.Out)
		},
	}
	f := cmd.Flags()
	cliutil.AddKubeconfigFlag(cmd, &o.kubeconfig)
	f.StringVarP(&o.namespace, "namespace", "n", o.namespace, "namespace for the probe pods")
	f.StringSliceVar(&o.nodes, "nodes", nil, "the two nodes, e.g. --nodes=node-1,node-2 (default: the first two Ready nodes)")
	f.IntVar(&o.pairs, "pairs", o.pairs, "pod pairs created together in each round")
	f.IntVar(&o.rounds, "rounds", o.rounds, "rounds (fresh pods each round)")
	f.StringVar(&o.image, "image", o.image, "pod image; must serve HTTP on --port and, for --via=apiserver, agnhost's /dial (default in the lab: its echo image)")
	f.IntVar(&o.port, "port", o.port, "the pods' HTTP port")
	f.DurationVar(&o.timeout, "timeout", o.timeout, "give up on one sample after this long")
	f.DurationVar(&o.interval, "interval", o.interval, "pause between attempts")
	f.DurationVar(&o.reqTimeout, "request-timeout", o.reqTimeout, "timeout of one attempt")
	f.DurationVar(&o.threshold, "threshold", o.threshold, "a sample slower than this fails the run")
	f.StringVar(&o.via, "via", o.via, "how to request from inside a pod: netns (pods this machine runs, e.g. the lab), apiserver (pod proxy + /dial), auto")
	f.StringVarP(&o.output, "output", "o", o.output, "table or json")
	return cmd
}

// validate checks the flags' values (a usage error when wrong).
func (o options) validate() error {
	switch {
	case o.via != "netns" && o.via != "apiserver" && o.via != "auto":
		return fmt.Errorf("--via %q: use netns, apiserver or auto", o.via)
	case o.output != "table" && o.output != "json":
		return fmt.Errorf("-o %q: use table or json", o.output)
	case o.pairs < 1 || o.rounds < 1:
		return fmt.Errorf("--pairs %d and --rounds %d must be at least 1", o.pairs, o.rounds)
	case len(o.nodes) != 0 && len(o.nodes) != 2:
		return fmt.Errorf("--nodes %v: give exactly two nodes, e.g. --nodes=node-1,node-2", o.nodes)
	case o.port < 1 || o.port > 65535:
		return fmt.Errorf("--port %d: use 1..65535", o.port)
	case o.timeout <= 0 || o.interval <= 0 || o.reqTimeout <= 0 || o.threshold <= 0:
		return fmt.Errorf("--timeout, --interval, --request-timeout and --threshold must be positive")
	}
	return nil
}

// autoRequester uses the pod's namespace when this machine runs the pod
// (the lab) and the API server's proxy otherwise.
type autoRequester struct {
	netns probe.Netns
	proxy probe.APIProxy
}

func (a autoRequester) Request(ctx context.Context, from *corev1.Pod, to netip.AddrPort) error {
	if probe.IsLabPod(from) {
		return a.netns.Request(ctx, from, to)
	}
	return a.proxy.Request(ctx, from, to)
}

// isLab says whether every node is the lab's kubelet stand-in.
func isLab(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	l, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, fmt.Errorf("listing nodes: %w", err)
	}
	for _, n := range l.Items {
		if n.Status.NodeInfo.KubeletVersion != kubelet.Version {
			return false, nil
		}
	}
	return len(l.Items) > 0, nil
}

// Run runs the probe and prints the report; unhealthy runs return exit 1.
func Run(ctx context.Context, o options, cs kubernetes.Interface, deps *cliutil.Deps, w io.Writer) error {
	var req probe.Requester
	proxy := probe.APIProxy{Client: cs, Port: o.port}
	switch o.via {
	case "netns":
		req = probe.Netns{}
	case "apiserver":
		req = proxy
	case "auto":
		req = autoRequester{proxy: proxy}
	default:
		return fmt.Errorf("--via %q: use netns, apiserver or auto", o.via)
	}
	if o.output != "table" && o.output != "json" {
		return fmt.Errorf("-o %q: use table or json", o.output)
	}
	args := []string{"netexec", fmt.Sprintf("--http-port=%d", o.port)}
	if !o.imageSet {
		lab, err := isLab(ctx, cs)
		if err != nil {
			return err
		}
		if lab {
			// The lab's kubelet stand-in runs only its echo image.
			o.image, args = kubelet.Image, nil
		}
	}
	rep, err := probe.Run(ctx, probe.Config{
		Client: cs, Namespace: o.namespace, Nodes: o.nodes, Pairs: o.pairs, Rounds: o.rounds,
		Image: o.image, Args: args, Port: o.port, Timeout: o.timeout, Interval: o.interval,
		RequestTimeout: o.reqTimeout, Threshold: o.threshold, Requester: req, Log: deps.Log,
	})
	if rep != nil {
		if perr := Print(w, o.output, rep); perr != nil && err == nil {
			err = perr
		}
	}
	if err != nil {
		return err
	}
	if !rep.Summary.Healthy() {
		fmt.Fprintf(deps.Streams.Err, "new-pod probe FAILED: %d of %d samples slower than %s (max %s): new pods are Ready before the network reaches them\n",
			rep.Summary.Slow, rep.Summary.Count, o.threshold, rep.Summary.Max.Round(time.Millisecond))
		return cliutil.ExitError{Code: 1}
	}
	return nil
}

// Print writes every sample and the summary.
func Print(w io.Writer, format string, rep *probe.Report) error {
	if format == "json" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ROUND\tPOD\tNODE\tPARTNER\tBOTH READY->FIRST OK\tOWN READY->FIRST OK\tATTEMPTS\tRESULT")
	for _, s := range rep.Samples {
		res := "ok"
		if s.Failed {
			res = "FAILED: " + s.Error
		} else if s.Delay > rep.Threshold {
			res = "SLOW"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", s.Round, s.Pod, s.Node, s.Partner, s.Delay.Round(time.Millisecond), s.SinceOwnReady.Round(time.Millisecond), s.Attempts, res)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	s := rep.Summary
	_, err := fmt.Fprintf(w, "nodes %v: %d samples, p50 %s, p99 %s, max %s, %d over %s, %d failed\n",
		rep.Nodes, s.Count, s.P50.Round(time.Millisecond), s.P99.Round(time.Millisecond), s.Max.Round(time.Millisecond), s.Slow, rep.Threshold, s.Failed)
	return err
}
