// Package podipam is the `mooring podipam` verb: operator tools for pod
// IPAM. Its one subcommand, `migrate --to=multi-pool`, walks the one
// supported change of mode (internal/podipamctl's migration) against the
// cluster: check, create the pool "default", restart the controller in
// multi-pool, and verify from the API.
package podipam

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// How the controller is restarted in multi-pool (--controller-update).
const (
	UpdateAuto   = "auto"
	UpdatePatch  = "patch"
	UpdateHelm   = "helm"
	UpdateManual = "manual"
)

// Options are the flags of `podipam migrate`.
type Options struct {
	Kubeconfig, Namespace, To  string
	Deployment, Update, Chart  string
	DryRun, Wait               bool
	Timeout, Interval          time.Duration
	V4, V6                     string
	MaskV4, MaskV6             int
	setV4, setV6, setM4, setM6 bool
}

// NewCommand builds `mooring podipam`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	cmd := &cobra.Command{Use: "podipam", Short: "Operate pod IPAM: change its mode the one supported way"}
	o := &Options{Namespace: controller.DefaultLeaseNamespace, Update: UpdateAuto, Chart: "charts/mooring",
		Timeout: 5 * time.Minute, Interval: time.Second, MaskV4: 24, MaskV6: 120}
	mig := &cobra.Command{
		Use:   "migrate --to=multi-pool",
		Short: "Move a cluster-pool cluster to multi-pool, keeping every node's block and every pod's address",
		Long: `Move a running cluster from pod IPAM mode cluster-pool to multi-pool, the one supported change.

It checks first (the recorded mode is cluster-pool; cluster-pool's CIDRs and mask sizes are known,
from the controller Deployment's flags or the --cluster-pool-* flags here; no PodIPPool stands in
the way; every node's block lies inside), then creates the PodIPPool "default" with exactly
cluster-pool's CIDRs and mask sizes, and restarts the controller with --pod-ipam-mode=multi-pool
(--controller-update). Each agent restarts on the recorded change and keeps its block and its pods'
addresses. --wait verifies it from the API and reports per node. --dry-run only checks and says what
would happen.`,
		Example: `  mooring podipam migrate --to=multi-pool --dry-run
  mooring podipam migrate --to=multi-pool --wait
  mooring podipam migrate --to=multi-pool --controller-update=manual \
      --cluster-pool-ipv4-cidr=10.244.0.0/16 --cluster-pool-ipv4-mask-size=24`,
		Args: cobra.NoArgs,
		PreRunE: func(cmd *cobra.Command, _ []string) error {
			f := cmd.Flags()
			o.setV4, o.setV6 = f.Changed("cluster-pool-ipv4-cidr"), f.Changed("cluster-pool-ipv6-cidr")
			o.setM4, o.setM6 = f.Changed("cluster-pool-ipv4-mask-size"), f.Changed("cluster-pool-ipv6-mask-size")
			return o.validate()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kube.RESTConfig(o.Kubeconfig, 20, 40)
			if err != nil {
				return err
			}
			c, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
			if err != nil {
				return err
			}
			return Run(cmd.Context(), *o, c, deps.Streams.Out, deps.Streams.Err)
		},
	}
	f := mig.Flags()
	cliutil.AddKubeconfigFlag(mig, &o.Kubeconfig)
	f.StringVar(&o.To, "to", "", "the mode to move to; multi-pool is the one supported (from cluster-pool)")
	f.StringVarP(&o.Namespace, "namespace", "n", o.Namespace, "the Mooring controller's namespace (where it records the pod IPAM mode)")
	f.BoolVar(&o.DryRun, "dry-run", false, "check and print what would happen; change nothing")
	f.StringVar(&o.Deployment, "deployment", "", "the controller's Deployment; empty finds it in --namespace")
	f.StringVar(&o.Update, "controller-update", o.Update, "how the controller is restarted with --pod-ipam-mode=multi-pool: patch (its Deployment's args), helm (print the helm upgrade to run), manual (say which flag to change), or auto (helm for a Helm-installed Deployment, patch for another, manual without one)")
	f.StringVar(&o.Chart, "chart", o.Chart, "the chart reference the release was installed from, for the printed helm upgrade")
	f.BoolVar(&o.Wait, "wait", false, "wait until the API shows the migration done (recorded mode, every node's blocks kept, every agent re-registered) and report per node")
	f.DurationVar(&o.Timeout, "timeout", o.Timeout, "how long --wait waits")
	f.StringVar(&o.V4, "cluster-pool-ipv4-cidr", "", "the controller's --cluster-pool-ipv4-cidr, when no Deployment runs it (comma-separated)")
	f.StringVar(&o.V6, "cluster-pool-ipv6-cidr", "", "the controller's --cluster-pool-ipv6-cidr, when no Deployment runs it (comma-separated)")
	f.IntVar(&o.MaskV4, "cluster-pool-ipv4-mask-size", o.MaskV4, "the controller's --cluster-pool-ipv4-mask-size")
	f.IntVar(&o.MaskV6, "cluster-pool-ipv6-mask-size", o.MaskV6, "the controller's --cluster-pool-ipv6-mask-size")
	cmd.AddCommand(mig)
	return cmd
}

func (o *Options) validate() error {
	switch o.To {
	case string(podipamctl.ModeMultiPool):
	case "":
		return cliutil.Usagef("--to is required: --to=multi-pool (the one supported change, from cluster-pool)")
	default:
		return cliutil.Usagef("--to=%s: only cluster-pool → multi-pool is supported; every other change would leave nodes allocating from blocks the cluster no longer records", o.To)
	}
	switch o.Update {
	case UpdateAuto, UpdatePatch, UpdateHelm, UpdateManual:
	default:
		return cliutil.Usagef("--controller-update %q: use auto, patch, helm or manual", o.Update)
	}
	if (o.setM4 || o.setM6) && !o.setV4 && !o.setV6 {
		return cliutil.Usagef("a --cluster-pool-*-mask-size needs its --cluster-pool-*-cidr")
	}
	if o.Wait && o.Timeout <= 0 {
		return cliutil.Usagef("--timeout %s: --wait needs a positive timeout", o.Timeout)
	}
	_, err := o.settings()
	return err
}

// settings are the --cluster-pool-* flags; nil when none was given.
func (o *Options) settings() (*podipamctl.ClusterPoolSettings, error) {
	if !o.setV4 && !o.setV6 {
		return nil, nil
	}
	s := &podipamctl.ClusterPoolSettings{MaskV4: o.MaskV4, MaskV6: o.MaskV6, Source: "the --cluster-pool-* flags"}
	for _, f := range []struct {
		name, v string
		into    *[]netip.Prefix
	}{{"cluster-pool-ipv4-cidr", o.V4, &s.V4}, {"cluster-pool-ipv6-cidr", o.V6, &s.V6}} {
		for _, c := range strings.Split(f.v, ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			p, err := netip.ParsePrefix(c)
			if err != nil {
				return nil, cliutil.Usagef("--%s %q: %v", f.name, c, err)
			}
			*f.into = append(*f.into, p)
		}
	}
	return s, nil
}

// Run plans, prints, and (unless --dry-run) migrates. A refused plan is
// printed and returns exit code 1; so does a --wait that runs out.
func Run(ctx context.Context, o Options, c client.Client, out, errw io.Writer) error {
	given, err := o.settings()
	if err != nil {
		return err
	}
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	plan, err := podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: o.Namespace, ClusterPool: given, Deployment: o.Deployment})
	if err != nil {
		return err
	}
	if plan.NothingToDo != "" {
		fmt.Fprintf(out, "nothing to do: %s.\n", plan.NothingToDo)
		return nil
	}
	update := chooseUpdate(o.Update, plan)
	writePlan(out, plan, update, o.Chart)
	if len(plan.Refusals) > 0 {
		fmt.Fprintln(errw, "refused: nothing was changed. Fix the following and run again:")
		for _, r := range plan.Refusals {
			fmt.Fprintln(errw, "  - "+r)
		}
		return cliutil.ExitError{Code: 1}
	}
	if update == UpdatePatch && plan.Controller == nil {
		fmt.Fprintln(errw, "refused: --controller-update=patch but no Deployment runs the controller: use --controller-update=manual (or name it with --deployment)")
		return cliutil.ExitError{Code: 1}
	}
	if o.DryRun {
		fmt.Fprintln(out, "\ndry run: nothing was changed.")
		return nil
	}
	fmt.Fprintln(out)
	if err := podipamctl.CreateDefaultPool(ctx, c, plan); err != nil {
		return err
	}
	if !plan.PoolExists && !plan.Done {
		fmt.Fprintf(out, "created PodIPPool %q\n", podipamctl.DefaultPool)
	}
	waitHint := "then verify with: mooring podipam migrate --to=multi-pool --wait"
	switch {
	case plan.Controller != nil && plan.Controller.Mode == podipamctl.ModeMultiPool:
		fmt.Fprintf(out, "Deployment %s/%s already runs --pod-ipam-mode=multi-pool\n", plan.Controller.Namespace, plan.Controller.Name)
	case update == UpdatePatch:
		if err := podipamctl.PatchController(ctx, c, plan); err != nil {
			return err
		}
		fmt.Fprintf(out, "patched Deployment %s/%s: --pod-ipam-mode=multi-pool (its rollout restarts the controller)\n", plan.Controller.Namespace, plan.Controller.Name)
		if plan.Controller.HelmRelease != "" {
			fmt.Fprintf(errw, "warning: Helm release %q still says cluster-pool: set controller.flags.podIpamMode=multi-pool in its values, or the next helm upgrade puts cluster-pool back and the controller refuses to start\n", plan.Controller.HelmRelease)
		}
	case update == UpdateHelm:
		fmt.Fprintf(out, "now run:\n  %s\n", podipamctl.HelmUpgradeCommand(plan, o.Chart))
		if !o.Wait {
			fmt.Fprintln(out, waitHint)
		}
	case update == UpdateManual && !plan.Done:
		fmt.Fprintln(out, "now restart the controller with --pod-ipam-mode=multi-pool (keep its other flags; multi-pool ignores --cluster-pool-*)")
		if !o.Wait {
			fmt.Fprintln(out, waitHint)
		}
	}
	if !o.Wait {
		if update == UpdatePatch {
			fmt.Fprintln(out, waitHint)
		}
		return nil
	}
	return wait(ctx, o, c, plan, out, errw)
}

// chooseUpdate resolves auto.
func chooseUpdate(update string, p *podipamctl.MigrationPlan) string {
	if update != UpdateAuto {
		return update
	}
	switch {
	case p.Controller == nil:
		return UpdateManual
	case p.Controller.HelmRelease != "":
		return UpdateHelm
	}
	return UpdatePatch
}

func wait(ctx context.Context, o Options, c client.Client, plan *podipamctl.MigrationPlan, out, errw io.Writer) error {
	fmt.Fprintf(out, "waiting up to %s for the migration (every %s):\n", o.Timeout, o.Interval)
	wctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	last, err := podipamctl.WaitMigrated(wctx, c, plan, o.Interval, func(m podipamctl.MigrationProgress) { writeProgress(out, m) })
	if err == nil {
		fmt.Fprintf(out, "migrated: pod IPAM mode multi-pool; %d node(s) kept their blocks as blocks of %q and their agents re-registered\n", len(plan.Nodes), podipamctl.DefaultPool)
		return nil
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	fmt.Fprintf(errw, "not migrated after %s:\n", o.Timeout)
	if last.Recorded != podipamctl.ModeMultiPool {
		fmt.Fprintf(errw, "  - the recorded mode is still %q: the controller has not started with --pod-ipam-mode=multi-pool (see its logs and its Deployment's rollout)\n", last.Recorded)
	}
	for _, n := range last.Nodes {
		if !n.Done() {
			fmt.Fprintf(errw, "  - %s: %s\n", n.Node, nodeState(n))
		}
	}
	return cliutil.ExitError{Code: 1}
}

func writeProgress(w io.Writer, m podipamctl.MigrationProgress) {
	fmt.Fprintf(w, "  recorded mode: %s\n", m.Recorded)
	for _, n := range m.Nodes {
		fmt.Fprintf(w, "  %-20s %s\n", n.Node, nodeState(n))
	}
}

// nodeState says what is done and what is missing on one node.
func nodeState(n podipamctl.NodeProgress) string {
	if n.Gone {
		return "its PodIPAMNode is gone (node deleted): not checked"
	}
	var parts []string
	if len(n.Missing) == 0 {
		parts = append(parts, "blocks kept")
	} else {
		parts = append(parts, fmt.Sprintf("blocks %s no longer held as blocks of %q", joinPrefixes(n.Missing), podipamctl.DefaultPool))
	}
	if n.Mode == podipamctl.ModeMultiPool {
		parts = append(parts, "recorded in multi-pool")
	} else {
		parts = append(parts, fmt.Sprintf("still recorded in %s (the controller has not re-recorded it)", orNone(n.Mode)))
	}
	if n.Registered {
		parts = append(parts, "agent re-registered")
	} else {
		parts = append(parts, "agent not re-registered yet (no multi-pool demand: has its agent restarted?)")
	}
	state := "waiting"
	if n.Done() {
		state = "done"
	}
	return state + ": " + strings.Join(parts, ", ")
}

func orNone(m podipamctl.Mode) string {
	if m == "" {
		return "no mode"
	}
	return string(m)
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// writePlan prints what was found, what is checked and what happens.
func writePlan(w io.Writer, p *podipamctl.MigrationPlan, update, chart string) {
	fmt.Fprintf(w, "Pod IPAM migration cluster-pool → multi-pool (mode record %s/%s)\n\n", p.Namespace, podipamctl.ModeConfigMap)
	fmt.Fprintln(w, "Found:")
	fmt.Fprintf(w, "  recorded mode       %s\n", orNone(p.Recorded))
	if p.ClusterPool.V4 != nil || p.ClusterPool.V6 != nil {
		fmt.Fprintf(w, "  cluster-pool        %s (from %s)\n", p.ClusterPool, p.ClusterPool.Source)
	}
	if c := p.Controller; c != nil {
		helm := ""
		if c.HelmRelease != "" {
			helm = fmt.Sprintf(", Helm release %q", c.HelmRelease)
		}
		fmt.Fprintf(w, "  controller          Deployment %s/%s, container %s, --pod-ipam-mode=%s%s\n", c.Namespace, c.Name, c.Container, c.Mode, helm)
	} else {
		fmt.Fprintln(w, "  controller          no Deployment runs it")
	}
	for _, n := range p.Nodes {
		fmt.Fprintf(w, "  node %-14s %s\n", n.Node, joinPrefixes(n.Blocks))
	}
	if len(p.Refusals) > 0 {
		return
	}
	if p.Done {
		fmt.Fprintln(w, "\nThe mode record already says multi-pool (after cluster-pool): only the controller's flag and the verification are left.")
	}
	fmt.Fprintln(w, "\nSteps:")
	if p.PoolExists || p.Done {
		fmt.Fprintf(w, "  1. PodIPPool %q exists with cluster-pool's CIDRs and mask sizes: kept\n", podipamctl.DefaultPool)
	} else {
		fmt.Fprintf(w, "  1. create PodIPPool %q: %s (the cluster-pool controller ignores it until step 2)\n", podipamctl.DefaultPool, describePool(p))
	}
	switch {
	case p.Controller != nil && p.Controller.Mode == podipamctl.ModeMultiPool:
		fmt.Fprintln(w, "  2. the controller's Deployment already runs --pod-ipam-mode=multi-pool")
	case p.Done && p.Controller == nil:
		fmt.Fprintln(w, "  2. a controller started with --pod-ipam-mode=multi-pool has recorded it")
	case update == UpdatePatch && p.Controller != nil:
		fmt.Fprintf(w, "  2. patch Deployment %s/%s: --pod-ipam-mode=multi-pool (its rollout restarts the controller)\n", p.Controller.Namespace, p.Controller.Name)
	case update == UpdateHelm:
		fmt.Fprintf(w, "  2. you run: %s\n", podipamctl.HelmUpgradeCommand(p, chart))
	default:
		fmt.Fprintln(w, "  2. you restart the controller with --pod-ipam-mode=multi-pool")
	}
	fmt.Fprintf(w, "  3. the controller records multi-pool and keeps each node's block as its first block of %q; each agent exits on the change, its DaemonSet restarts it, and it keeps its allocations (running pods keep their addresses)\n", podipamctl.DefaultPool)
	fmt.Fprintln(w, "  4. --wait: the recorded mode is multi-pool, every node above holds its blocks as blocks of \"default\", recorded in multi-pool, and its agent wrote its multi-pool demand")
}

func describePool(p *podipamctl.MigrationPlan) string {
	var s []string
	if f := p.Pool.Spec.IPv4; f != nil {
		s = append(s, fmt.Sprintf("ipv4 %s maskSize %d", strings.Join(f.CIDRs, ","), f.MaskSize))
	}
	if f := p.Pool.Spec.IPv6; f != nil {
		s = append(s, fmt.Sprintf("ipv6 %s maskSize %d", strings.Join(f.CIDRs, ","), f.MaskSize))
	}
	return strings.Join(s, ", ")
}
