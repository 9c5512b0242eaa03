// Package failover is the `mooring failover` verb: it measures what a
// client sees when the node announcing a LoadBalancer address dies. The
// measurement itself lives in internal/failover; this package only turns
// flags into its Config and Env and prints the result.
package failover

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/client-go/kubernetes"
	crclient "sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/cliutil"
	fo "github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
)

// options are the flags.
type options struct {
	kubeconfig, namespace          string
	rate                           float64
	timeout, settle, settleTimeout time.Duration
	quiet, maxRun, warmup          time.Duration
	runs                           int
	killCommand, restoreCommand    string
	soft, noFinalRestore           bool
	agentNamespace, agentSelector  string
	output, svgDir                 string
	nodeMACs                       []string
	address                        string
	port                           uint16
	scheme, path, host             string
	insecure, noNeighbour          bool
	clientNetNS, routerNetNS       string
	// reader names the announcing node (agentstatus.Announcements from the
	// agents' L2Announcers) when the client's MAC does not; not a flag.
	reader crclient.Reader
	// announcedBy replaces reader in tests (loopback addresses, which no
	// agent announces).
	announcedBy func(context.Context, netip.Addr) (string, error)
}

// ownerCluster is a KubeCluster whose announcing node comes from fn.
type ownerCluster struct {
	fo.KubeCluster
	fn func(context.Context, netip.Addr) (string, error)
}

func (c ownerCluster) AnnouncedBy(ctx context.Context, a netip.Addr) (string, error) {
	return c.fn(ctx, a)
}

// NewCommand builds `mooring failover`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	o := options{}
	cmd := &cobra.Command{
		Use:   "failover SERVICE",
		Short: "Kill the node announcing a LoadBalancer Service and measure what a client sees",
		Long: `failover sends requests to a LoadBalancer Service's address at a steady rate, each on
its own connection, kills the node that announces the address, and records the
timeline a client sees: the kill, the first error, the change of the MAC the
client uses for the address, the address answering again (phase 1), and the
dead node's endpoints leaving the EndpointSlices with the last error (phase 2).
Errors are counted by class per phase: connect-timeout, unreachable, refused,
reset, tls, response-timeout, closed, http-<status>.

It refuses to run unless the Service's ready backends sit on at least two
nodes: otherwise it would measure pod rescheduling, not failover.

The client is this machine: requests leave from this network namespace (or
from --client-netns), and the owner is read from its neighbour table. Which
node owns a MAC comes from --node-mac, else from the running lab's state when
the cluster is that lab (` + "`mooring lab up`" + `), else the announcing node is
the one the agents' L2Announcers name (as ` + "`mooring status`" + ` shows it).

A client behind a router that holds the address as a BGP (ECMP) route over the
nodes — the BGP lab (` + "`mooring lab up --bgp`" + `), found by itself, or --router-netns — sees the
router's MAC, never a node's. Then the node killed is one of the route's next hops (one
holding a ready backend when there is one), the router's kernel route is read every 10 ms,
and the run marks when that next hop leaves the route ("route withdrawn"): phase 1 is the
route withdrawal, from the kill to the first answer after the client's last failure sent
before it; failures after it are the stale endpoints' (phase 2).

With --restore-command the killed node is restored between runs and after the
last one, and the cluster awaited healthy, so that the next measurement can
start; --no-final-restore (or no --restore-command) leaves the last killed node
killed, and the output says so.`,
		Example: `  # hard failover: the user's command kills a node, 10 runs, pictures in ./failover
  mooring failover -n demo echo --kill-command 'docker kill {node}' \
      --restore-command 'docker start {node}' --runs 10 --svg-dir ./failover

  # soft failover: delete the announcing node's agent pod
  mooring failover -n demo echo --soft -o json

  # the one-machine lab (` + "`make demo`" + ` running), from the repository as root: the lab's
  # client namespace is the client, the lab kills and restores, node MACs come
  # from the lab
  export KUBECONFIG=/run/mooring-lab/kubeconfig
  bin/mooring failover echo --client-netns "$(bin/mooring lab netns client)" \
      --kill-command 'bin/mooring lab kill {node}' --restore-command 'bin/mooring lab restore {node}'`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cliutil.Usagef("give the name of one Service (SERVICE, its namespace with -n), not %d arguments", len(args))
			}
			return nil
		},
		PreRunE: func(*cobra.Command, []string) error { return o.validate() },
		RunE: func(cmd *cobra.Command, args []string) error {
			return run(cmd.Context(), deps, o, args[0])
		},
	}
	bindFlags(cmd.Flags(), &o)
	return cmd
}

// bindFlags defines the flags into o.
func bindFlags(f *pflag.FlagSet, o *options) {
	f.StringVar(&o.kubeconfig, cliutil.KubeconfigFlag, "", cliutil.KubeconfigUsage)
	f.StringVarP(&o.namespace, "namespace", "n", "default", "the Service's namespace")
	f.Float64Var(&o.rate, "rate", 10, "requests per second, each on its own connection")
	f.DurationVar(&o.timeout, "timeout", time.Second, "timeout of one request, connect to last byte")
	f.IntVar(&o.runs, "runs", 1, "number of failovers to measure")
	f.StringVar(&o.killCommand, "kill-command", "", "shell command that kills a node; {node} is replaced by its name (also in $MOORING_NODE)")
	f.StringVar(&o.restoreCommand, "restore-command", "", "shell command that brings a killed node back, between runs and after the last; {node} as for --kill-command")
	f.BoolVar(&o.noFinalRestore, "no-final-restore", false, "leave the node killed by the last run killed (the output says so)")
	f.BoolVar(&o.soft, "soft", false, "soft failover: delete the announcing node's agent pod instead of killing the node")
	f.StringVar(&o.agentNamespace, "agent-namespace", "mooring-system", "namespace of the agent pods (--soft)")
	f.StringVar(&o.agentSelector, "agent-selector", "app.kubernetes.io/name=mooring,app.kubernetes.io/component=agent", "label selector of the agent pods (--soft; config/agent/daemonset.yaml)")
	f.StringVarP(&o.output, "output", "o", "table", "output: table or json")
	f.StringVar(&o.svgDir, "svg-dir", "", "write an SVG timeline per run into this directory")
	f.DurationVar(&o.settle, "settle", 5*time.Second, "time to wait between runs once the cluster is healthy again")
	f.DurationVar(&o.settleTimeout, "settle-timeout", 3*time.Minute, "how long to wait for the cluster to become healthy between runs")
	f.DurationVar(&o.quiet, "quiet", 5*time.Second, "a run ends once errors have stopped this long (and the dead node's endpoints are gone)")
	f.DurationVar(&o.maxRun, "max-run", 3*time.Minute, "a run ends at the latest this long after the kill")
	f.DurationVar(&o.warmup, "warmup", 15*time.Second, "how long to wait for the address to answer before the kill")
	f.StringArrayVar(&o.nodeMACs, "node-mac", nil, "node=MAC: which node owns a MAC the client may see (repeatable; default: from the running lab's state when the cluster is the lab)")
	f.StringVar(&o.address, "address", "", "the address to test (default: the Service's first LoadBalancer ingress IP)")
	f.Uint16Var(&o.port, "port", 0, "the port to test (default: the Service's first TCP port)")
	f.StringVar(&o.scheme, "scheme", "http", "request: http, https or tcp (connect only)")
	f.StringVar(&o.path, "path", "/", "HTTP path")
	f.StringVar(&o.host, "host", "", "Host header and TLS server name (default: the address)")
	f.BoolVar(&o.insecure, "insecure", false, "https: do not verify the certificate (the handshake is still made)")
	f.BoolVar(&o.noNeighbour, "no-neighbour", false, "do not read the client's neighbour table (no owner-change marker)")
	f.StringVar(&o.routerNetNS, "router-netns", "", "the client is behind a router in this network namespace (same path forms as --client-netns) that holds the address as a BGP/ECMP route over the nodes: kill one of its next hops and mark when that next hop leaves the route (phase 1 is the route withdrawal); default: the BGP lab's router when the cluster is that lab")
	f.StringVar(&o.clientNetNS, "client-netns", "", "be the client from this network namespace (a path such as /run/netns/NAME or /proc/PID/task/TID/ns/net): requests leave from it and its neighbour table is read")
}

// validate checks the flags' values before anything is measured (a
// usage error when wrong).
func (o options) validate() error {
	switch {
	case o.output != "table" && o.output != "json":
		return fmt.Errorf("-o %q: use table or json", o.output)
	case o.soft && o.killCommand != "":
		return errors.New("--soft and --kill-command exclude each other: pick one way to kill")
	case !o.soft && o.killCommand == "":
		return errors.New("say how to kill the announcing node: --kill-command '...{node}...' for a hard failover, or --soft to delete its agent pod")
	case o.runs < 1:
		return fmt.Errorf("--runs %d: measure at least 1 failover", o.runs)
	case o.rate <= 0 || o.timeout <= 0:
		return fmt.Errorf("--rate %v and --timeout %s must be positive", o.rate, o.timeout)
	case o.quiet <= 0 || o.maxRun <= 0 || o.warmup <= 0 || o.settleTimeout <= 0 || o.settle < 0:
		return errors.New("--quiet, --max-run, --warmup and --settle-timeout must be positive, --settle not negative")
	case o.scheme != "http" && o.scheme != "https" && o.scheme != "tcp":
		return fmt.Errorf("--scheme %q: use http, https or tcp", o.scheme)
	}
	if o.address != "" {
		if _, err := netip.ParseAddr(o.address); err != nil {
			return fmt.Errorf("--address %q is not an IP address", o.address)
		}
	}
	for _, s := range o.nodeMACs {
		if _, err := fo.ParseNodeMAC(s); err != nil {
			return err
		}
	}
	return nil
}

func run(ctx context.Context, deps *cliutil.Deps, o options, name string) error {
	var macs fo.NodeMACs
	for _, s := range o.nodeMACs {
		m, err := fo.ParseNodeMAC(s)
		if err != nil {
			return err
		}
		macs = append(macs, m)
	}
	rc, err := kube.RESTConfig(o.kubeconfig, 20, 40)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("building a Kubernetes client: %w", err)
	}
	if o.reader, err = crclient.New(rc, crclient.Options{Scheme: kube.Scheme()}); err != nil {
		return fmt.Errorf("building a Kubernetes client: %w", err)
	}
	if o.routerNetNS == "" {
		if p := routerNetNSFromLab(ctx, client, lab.StateDirFromEnv()); p != "" {
			fmt.Fprintf(deps.Streams.Err, "routed: the client is behind the BGP lab's router (%s)\n", p)
			o.routerNetNS = p
		}
	}
	if len(macs) == 0 {
		if m, dir := macsFromLab(ctx, client, lab.StateDirFromEnv()); len(m) > 0 {
			fmt.Fprintf(deps.Streams.Err, "node MACs from the lab in %s\n", dir)
			macs = m
		}
	}
	return runWith(ctx, deps, o, name, client, macs)
}

// runWith is run after the client is built: the seam for tests with a fake
// clientset.
func runWith(ctx context.Context, deps *cliutil.Deps, o options, name string, client kubernetes.Interface, macs fo.NodeMACs) error {
	cluster := fo.KubeCluster{Client: client, Namespace: o.namespace, Name: name, Reader: o.reader}
	target, err := o.target(ctx, cluster)
	if err != nil {
		return err
	}
	cfg := fo.DefaultConfig(target)
	cfg.Rate, cfg.Timeout, cfg.Runs, cfg.Soft = o.rate, o.timeout, o.runs, o.soft
	cfg.Settle, cfg.SettleTimeout, cfg.Quiet, cfg.MaxRun, cfg.Warmup = o.settle, o.settleTimeout, o.quiet, o.maxRun, o.warmup
	cfg.NoFinalRestore = o.noFinalRestore
	if err := cfg.Validate(); err != nil {
		return err
	}
	var fc fo.Cluster = cluster
	if o.announcedBy != nil {
		fc = ownerCluster{cluster, o.announcedBy}
	}
	env := fo.Env{Cluster: fc, NodeMACs: macs, Log: deps.Log, Progress: progress(deps.Streams.Err)}
	if o.soft {
		env.Killer = fo.AgentPodKiller{Client: client, Namespace: o.agentNamespace, Selector: o.agentSelector}
	} else {
		env.Killer = fo.Command{Line: o.killCommand}
	}
	if o.restoreCommand != "" {
		env.Restorer = fo.Command{Line: o.restoreCommand}
	}
	var owner fo.OwnerObserver = fo.NeighbourTable{}
	if o.clientNetNS != "" {
		nc, err := fo.OpenNetNSClient(o.clientNetNS)
		if err != nil {
			return fmt.Errorf("--client-netns: %w", err)
		}
		defer nc.Close()
		env.Dial, owner = nc.Dial, nc.Owner
	}
	if o.routerNetNS != "" {
		kr, err := fo.OpenKernelRoutes(o.routerNetNS)
		if err != nil {
			return fmt.Errorf("--router-netns: %w", err)
		}
		defer kr.Close()
		if env.NodeAddrs, err = nodeAddrs(ctx, client); err != nil {
			return err
		}
		// The client's neighbour is the router: no owner to watch.
		env.Routes, owner = kr, nil
	}
	if !o.noNeighbour && owner != nil {
		env.Owner = owner
	}
	return Execute(ctx, deps.Streams.Out, o.output, o.svgDir, o.namespace+"/"+name, cfg, env)
}

// target finds the address and port to test from the Service and the flags.
func (o options) target(ctx context.Context, c fo.KubeCluster) (fo.Target, error) {
	si, err := c.Service(ctx)
	if err != nil {
		return fo.Target{}, err
	}
	t := fo.Target{Scheme: o.scheme, Path: o.path, Host: o.host, InsecureSkipVerify: o.insecure}
	var addr netip.Addr
	switch {
	case o.address != "":
		if addr, err = netip.ParseAddr(o.address); err != nil {
			return t, fmt.Errorf("--address: %w", err)
		}
		if !slices.Contains(si.Addrs, addr.Unmap()) {
			return t, fmt.Errorf("--address %s is not among %s/%s's LoadBalancer addresses %v", addr, c.Namespace, c.Name, si.Addrs)
		}
	case len(si.Addrs) == 0:
		return t, fmt.Errorf("Service %s/%s has no LoadBalancer address yet (status.loadBalancer.ingress is empty): is the controller running and a pool matching?", c.Namespace, c.Name)
	default:
		addr = si.Addrs[0]
	}
	port := o.port
	if port == 0 {
		if len(si.TCPPorts) == 0 {
			return t, fmt.Errorf("Service %s/%s has no TCP port: give --port", c.Namespace, c.Name)
		}
		port = si.TCPPorts[0]
	}
	t.Addr = netip.AddrPortFrom(addr, port)
	return t, t.Validate()
}

// Execute runs the measurement and prints it: the table or JSON on out, an
// SVG per run into svgDir when set. It is exported so the lab can run the
// same report with its own Env (client-namespace dialer, hard kill).
func Execute(ctx context.Context, out io.Writer, format, svgDir, service string, cfg fo.Config, env fo.Env) error {
	started := time.Now()
	runs, runErr := fo.Measure(ctx, cfg, env)
	rep := fo.Report{
		Service: service, Target: cfg.Target.String(), Rate: cfg.Rate, TimeoutS: cfg.Timeout.Seconds(),
		Mode: "hard", StartedAt: started,
	}
	if cfg.Soft {
		rep.Mode = "soft"
	}
	if runErr != nil {
		rep.Error = runErr.Error()
	}
	var svgErr error
	for _, r := range runs {
		rr := fo.NewRunReport(r)
		if svgDir != "" {
			path, err := writeSVG(svgDir, service, r)
			if err != nil {
				svgErr = errors.Join(svgErr, err)
			}
			rr.SVG = path
		}
		rep.Runs = append(rep.Runs, rr)
	}
	tls := make([]fo.Timeline, len(runs))
	for i, r := range runs {
		tls[i] = r.Timeline
	}
	sum := fo.SummarizeRuns(tls)
	rep.Summary = fo.NewSummaryJSON(sum)
	var werr error
	switch {
	case format == "json":
		werr = fo.WriteJSON(out, rep)
	case len(runs) > 0:
		werr = fo.WriteTable(out, runs, sum)
		if why := fo.LeftKilled(cfg, env.Restorer != nil); why != "" && runErr == nil {
			fmt.Fprintf(out, "WARNING: %s is left killed: %s\n", runs[len(runs)-1].Node, why)
		}
		for _, rr := range rep.Runs {
			for _, w := range rr.Warnings {
				fmt.Fprintf(out, "run %d: warning: %s\n", rr.Run, w)
			}
			if rr.SVG != "" {
				fmt.Fprintf(out, "run %d: timeline picture %s\n", rr.Run, rr.SVG)
			}
		}
	}
	return errors.Join(runErr, svgErr, werr)
}

func writeSVG(dir, service string, r fo.RunResult) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating --svg-dir: %w", err)
	}
	path := filepath.Join(dir, fmt.Sprintf("failover-run-%02d.svg", r.Run))
	f, err := os.Create(path)
	if err != nil {
		return "", fmt.Errorf("writing the SVG of run %d: %w", r.Run, err)
	}
	title := fmt.Sprintf("%s — run %d: killed %s", service, r.Run, r.Node)
	if err := fo.RenderSVG(f, r, title); err != nil {
		f.Close()
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return path, f.Close()
}

// progress prints progress lines on w.
func progress(w io.Writer) func(fo.ProgressEvent) {
	return func(e fo.ProgressEvent) {
		when := "      "
		if e.SinceKill >= 0 {
			when = fmt.Sprintf("%+6.2fs", e.SinceKill.Seconds())
		}
		fmt.Fprintf(w, "[run %d/%d %s] %s\n", e.Run, e.Runs, when, e.Text)
	}
}
