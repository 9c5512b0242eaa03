// Package doctor is the `mooring doctor` verb: it gathers a read-only
// snapshot (internal/doctor/gather), runs the checks (internal/doctor) and
// prints a table or JSON. Exit code 1 when any finding is a problem.
package doctor

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/cliutil"
	core "github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/kube"
)

// Options are the verb's flags.
type Options struct {
	Kubeconfig  string
	Output      string
	NodeSubnets []string
	MetricsPort int
	// Interface, when set, runs the ARP/NDP audit of the pools' addresses
	// from it (needs CAP_NET_RAW and a host on the Services' segment).
	Interface string
	All       bool
	reader    client.Reader
	// responders replaces the audit's prober (tests: a lab host's eth0).
	responders gather.ResponderFunc
	// agentGet replaces the HTTP client that reads the agents' /metrics
	// and /readyz (tests: through a lab namespace).
	agentGet func(ctx context.Context, node *corev1.Node, path string) (int, []byte, error)
}

// NewCommand builds `mooring doctor`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	o := Options{Output: "table", MetricsPort: 9473}
	cmd := &cobra.Command{
		Use:   "doctor",
		Short: "Check the cluster for what breaks LoadBalancer addresses: pools off-subnet, stale ARP responders, kube-proxy strictARP, other load balancers, foreign MACs, split brain, agents that fail a data-plane step",
		Long: "doctor reads the cluster (read-only), each node's agent metrics and /readyz (when reachable) and, with --interface, asks the segment\n" +
			"who answers ARP/NDP for the pools' addresses; it reports what it finds with the fix.\n" +
			"A problem is what a live check sees now (the agents' metrics and readiness, the ARP/NDP audit, the API objects): it exits 1 then,\n" +
			"0 otherwise. Agents' Events that no live check confirms are shown as history and never change the exit code; agent metrics\n" +
			"that cannot be read are a warning of their own. See docs/doctor.md.",
		Args:    cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { return o.validate() },
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.RESTConfig(o.Kubeconfig, 20, 40)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			dc, err := dynamic.NewForConfig(cfg)
			if err != nil {
				return err
			}
			cl, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
			if err != nil {
				return err
			}
			o.reader = cl
			return Run(cmd.Context(), o, cs, dc, deps.Streams.Out)
		},
	}
	f := cmd.Flags()
	cliutil.AddKubeconfigFlag(cmd, &o.Kubeconfig)
	f.StringVarP(&o.Output, "output", "o", o.Output, "table or json")
	f.StringArrayVar(&o.NodeSubnets, "node-subnet", nil, "the nodes' L2 network, CIDR (every node) or NODE=CIDR; repeatable (default: the /24 or /64 around each InternalIP, marked as assumed)")
	f.IntVar(&o.MetricsPort, "agent-metrics-port", o.MetricsPort, "agent metrics and /readyz port on each node's InternalIP; 0 skips them")
	f.StringVar(&o.Interface, "interface", "", "interface on the Services' segment to ask who answers ARP/NDP for the pools' addresses (needs CAP_NET_RAW); empty skips the audit")
	f.BoolVar(&o.All, "all", false, "also print informational findings")
	return cmd
}

// validate checks the flags' values (a usage error when wrong).
func (o Options) validate() error {
	if o.Output != "table" && o.Output != "json" {
		return fmt.Errorf("-o %q: use table or json", o.Output)
	}
	if o.MetricsPort < 0 || o.MetricsPort > 65535 {
		return fmt.Errorf("--agent-metrics-port %d: use 1..65535, or 0 to skip node metrics", o.MetricsPort)
	}
	_, err := ParseSubnets(o.NodeSubnets)
	return err
}

// ParseSubnets reads --node-subnet values.
func ParseSubnets(vals []string) (map[string][]netip.Prefix, error) {
	out := map[string][]netip.Prefix{}
	for _, v := range vals {
		node, cidr, ok := strings.Cut(v, "=")
		if !ok {
			node, cidr = "", v
		}
		p, err := netip.ParsePrefix(strings.TrimSpace(cidr))
		if err != nil {
			return nil, fmt.Errorf("--node-subnet %q: want CIDR or NODE=CIDR: %w", v, err)
		}
		out[node] = append(out[node], p.Masked())
	}
	return out, nil
}

// Run gathers, checks and prints; it returns cliutil.ExitError{Code: 1}
// when any finding is a problem.
func Run(ctx context.Context, o Options, cs kubernetes.Interface, dc dynamic.Interface, w io.Writer) error {
	if o.Output != "table" && o.Output != "json" {
		return cliutil.Usagef("-o %q: use table or json", o.Output)
	}
	subnets, err := ParseSubnets(o.NodeSubnets)
	if err != nil {
		return cliutil.UsageError{Err: err}
	}
	opt := gather.Options{NodeSubnets: subnets, Reader: o.reader, Interface: o.Interface, Responders: o.responders}
	if o.MetricsPort > 0 {
		get := o.agentGet
		if get == nil {
			get = gather.HTTPAgent(o.MetricsPort, 2*time.Second)
		}
		opt.Metrics, opt.Readyz = gather.AgentMetrics(get), gather.AgentReadyz(get)
	}
	if o.Interface != "" && opt.Responders == nil {
		if opt.Responders, err = arpprobe.InterfaceProber(o.Interface, 500*time.Millisecond); err != nil {
			return cliutil.Usagef("%v", err)
		}
	}
	in, err := gather.Gather(ctx, cs, dc, opt)
	if err != nil {
		return err
	}
	findings := core.Run(in)
	if err := Print(w, o.Output, findings, o.All); err != nil {
		return err
	}
	if core.HasProblem(findings) {
		return cliutil.ExitError{Code: 1}
	}
	return nil
}

// Print writes the findings, problems first, then warnings and history;
// info findings only with all.
func Print(w io.Writer, format string, fs []core.Finding, all bool) error {
	var shown []core.Finding
	for _, f := range fs {
		if all || f.Severity != core.Info {
			shown = append(shown, f)
		}
	}
	if format == "json" {
		if shown == nil {
			shown = []core.Finding{}
		}
		b, err := json.MarshalIndent(map[string]any{"findings": shown, "problem": core.HasProblem(fs)}, "", "  ")
		if err != nil {
			return err
		}
		_, err = w.Write(append(b, '\n'))
		return err
	}
	if len(shown) == 0 {
		_, err := fmt.Fprintln(w, "no problems found")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SEVERITY\tCHECK\tOBJECT\tNODE\tMESSAGE\tFIX")
	for _, f := range shown {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", f.Severity, f.Check, dash(f.Object), dash(f.Node), f.Message, dash(f.Fix))
	}
	return tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
