// Package migrate is the `mooring migrate metallb plan|run` verb: the
// ordered hand-over of field notes §3 (internal/migrate), performed against
// the cluster by internal/migrate/cluster.
package migrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/cli/importcmd"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/foreignlb"
	"github.com/mooringlb/mooring/internal/importer"
	"github.com/mooringlb/mooring/internal/kube"
	core "github.com/mooringlb/mooring/internal/migrate"
	"github.com/mooringlb/mooring/internal/migrate/cluster"
)

// Options are the verb's flags.
type Options struct {
	Kubeconfig, Namespace, Output string
	ImportFile, SaveDir           string
	Interface, Probe              string
	LeaseNamespace, LeaseName     string
	ProbeInterval, CheckTimeout   time.Duration
	ProbeTimeout                  time.Duration
	reader                        client.Reader
}

// NewCommand builds `mooring migrate`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	cmd := &cobra.Command{Use: "migrate", Short: "Move LoadBalancer Services to Mooring with no lost request"}
	mlb := &cobra.Command{Use: "metallb", Short: "From MetalLB: plan prints the ordered procedure, run walks it with a check between steps"}
	o := &Options{Namespace: "metallb-system", Output: "text", ImportFile: "mooring-import.yaml", SaveDir: "metallb-backup",
		LeaseNamespace: controller.DefaultLeaseNamespace, LeaseName: controller.DefaultLeaseName,
		ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 2 * time.Second, CheckTimeout: 60 * time.Second}
	plan := &cobra.Command{
		Use: "plan", Short: "Print the ordered steps for this cluster: what is applied, checked, removed, and how to undo each", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Output != "text" && o.Output != "json" {
				return cliutil.Usagef("-o %q: use text or json", o.Output)
			}
			cs, dc, err := clients(o)
			if err != nil {
				return err
			}
			if done, err := finished(cmd.Context(), o, cs, dc, deps.Streams.Out); done || err != nil {
				return err
			}
			st, err := Prepare(cmd.Context(), *o, cs, dc, deps.Streams.Err)
			if err != nil {
				return err
			}
			if o.Output == "json" {
				b, err := cluster.MarshalPlan(st.Steps)
				if err != nil {
					return err
				}
				_, err = deps.Streams.Out.Write(append(b, '\n'))
				return err
			}
			return core.WriteText(deps.Streams.Out, st.Steps, st.Runner.Facts)
		},
	}
	run := &cobra.Command{
		Use: "run", Short: "Walk the plan: each step, then its checks; stop at the first failed check and print how to undo", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cs, dc, err := clients(o)
			if err != nil {
				return err
			}
			if done, err := finished(cmd.Context(), &Options{Namespace: o.Namespace, Output: "text", LeaseNamespace: o.LeaseNamespace, LeaseName: o.LeaseName},
				cs, dc, deps.Streams.Out); done || err != nil {
				return err
			}
			return Run(cmd.Context(), *o, cs, dc, deps.Streams.Out, deps.Streams.Err)
		},
	}
	for _, c := range []*cobra.Command{plan, run} {
		c.PreRunE = func(*cobra.Command, []string) error { return o.validate() }
		f := c.Flags()
		cliutil.AddKubeconfigFlag(c, &o.Kubeconfig)
		f.StringVar(&o.Namespace, "metallb-namespace", o.Namespace, "MetalLB's namespace")
		f.StringVar(&o.ImportFile, "import-file", o.ImportFile, "where the imported Mooring objects are written")
		f.StringVar(&o.SaveDir, "save-dir", o.SaveDir, "where MetalLB's objects are saved before deletion (for rollback)")
		f.StringVar(&o.Interface, "interface", "", "interface on the Services' segment to count ARP/NDP responders on (needs CAP_NET_RAW); empty skips that check")
		f.StringVar(&o.Probe, "probe", "", "URL through a LoadBalancer address that must keep answering during the migration; empty skips that check")
		f.DurationVar(&o.ProbeInterval, "probe-interval", o.ProbeInterval, "pause between --probe requests")
		f.DurationVar(&o.ProbeTimeout, "probe-timeout", o.ProbeTimeout, "how long a --probe request may take before it counts as failed (as your clients' own timeout)")
		f.DurationVar(&o.CheckTimeout, "check-timeout", o.CheckTimeout, "how long a step's checks may take to pass")
		f.StringVar(&o.LeaseNamespace, "lease-namespace", o.LeaseNamespace, "namespace of the Mooring controller's leader-election Lease (where it publishes --adopt-only)")
		f.StringVar(&o.LeaseName, "lease-name", o.LeaseName, "name of the Mooring controller's leader-election Lease")
	}
	plan.Flags().StringVarP(&o.Output, "output", "o", o.Output, "text or json")
	mlb.AddCommand(plan, run)
	cmd.AddCommand(mlb)
	return cmd
}

// validate checks the flags' values (a usage error when wrong).
func (o *Options) validate() error {
	switch {
	case o.Output != "text" && o.Output != "json":
		return fmt.Errorf("-o %q: use text or json", o.Output)
	case o.ProbeInterval <= 0 || o.ProbeTimeout <= 0 || o.CheckTimeout <= 0:
		return fmt.Errorf("--probe-interval %s, --probe-timeout %s and --check-timeout %s must be positive", o.ProbeInterval, o.ProbeTimeout, o.CheckTimeout)
	case o.Namespace == "" || o.ImportFile == "" || o.SaveDir == "":
		return fmt.Errorf("--metallb-namespace, --import-file and --save-dir must not be empty")
	}
	if o.Probe != "" {
		if u, err := url.Parse(o.Probe); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("--probe %q: give an http:// or https:// URL through a LoadBalancer address, e.g. http://192.0.2.10/", o.Probe)
		}
	}
	return nil
}

// finished prints Finished and returns true when there is nothing to
// migrate.
func finished(ctx context.Context, o *Options, cs kubernetes.Interface, dc dynamic.Interface, w io.Writer) (bool, error) {
	f, err := CheckFinished(ctx, *o, cs, dc)
	if err != nil || f == nil {
		return false, err
	}
	if o.Output == "json" {
		b, err := json.MarshalIndent(f, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = w.Write(append(b, '\n'))
		return true, err
	}
	return true, f.WriteText(w, *o)
}

func clients(o *Options) (kubernetes.Interface, dynamic.Interface, error) {
	cs, dc, cl, err := allClients(o)
	o.reader = cl
	return cs, dc, err
}

func allClients(o *Options) (kubernetes.Interface, dynamic.Interface, client.Reader, error) {
	cfg, err := kube.RESTConfig(o.Kubeconfig, 20, 40)
	if err != nil {
		return nil, nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	cl, err := client.New(cfg, client.Options{Scheme: kube.Scheme()})
	return cs, dc, cl, err
}

// withLeaseDefaults is o with the controller's default Lease where none
// is given.
func (o Options) withLeaseDefaults() Options {
	if o.LeaseNamespace == "" {
		o.LeaseNamespace = controller.DefaultLeaseNamespace
	}
	if o.LeaseName == "" {
		o.LeaseName = controller.DefaultLeaseName
	}
	return o
}

// Prepared is a plan with everything run needs.
type Prepared struct {
	Steps  []core.Step
	Runner *cluster.Runner
	Import *importer.Result
}

// Prepare reads MetalLB's pieces and configuration, imports it, records
// the Services' addresses and builds the plan. It writes the import to
// o.ImportFile and its report to report.
func Prepare(ctx context.Context, o Options, cs kubernetes.Interface, dc dynamic.Interface, report io.Writer) (*Prepared, error) {
	o = o.withLeaseDefaults()
	f := core.Facts{MetalLBNamespace: o.Namespace, Interface: o.Interface, Probe: o.Probe, ImportFile: o.ImportFile, SaveDir: o.SaveDir,
		LeaseNamespace: o.LeaseNamespace, LeaseName: o.LeaseName}
	if err := cluster.FindMetalLB(ctx, cs, &f); err != nil {
		return nil, err
	}
	inputs, err := importcmd.ReadCluster(ctx, dc, "metallb", o.Namespace)
	if err != nil {
		return nil, err
	}
	res, err := importer.MetalLB(inputs)
	if err != nil {
		return nil, err
	}
	if err := res.Report.WriteText(report); err != nil {
		return nil, err
	}
	var doc []byte
	var apply []*unstructured.Unstructured
	for i, obj := range res.Objects() {
		b, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			doc = append(doc, "---\n"...)
		}
		doc = append(doc, b...)
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(b, &u.Object); err != nil {
			return nil, err
		}
		apply = append(apply, u)
	}
	speakerPods, err := importFacts(ctx, cs, o.Namespace, res, &f)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(o.ImportFile, doc, 0o644); err != nil {
		return nil, fmt.Errorf("writing %s: %w", o.ImportFile, err)
	}
	var mlb []cluster.Object
	for _, gvr := range importcmd.Resources["metallb"] {
		l, err := dc.Resource(gvr).List(ctx, metav1.ListOptions{})
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			mlb = append(mlb, cluster.Object{GVR: gvr, Obj: &l.Items[i]})
			f.MetalLBObjects = append(f.MetalLBObjects, fmt.Sprintf("%s -n %s %s", gvr.GroupResource(), l.Items[i].GetNamespace(), l.Items[i].GetName()))
		}
	}
	snap, err := cluster.TakeSnapshot(ctx, cs)
	if err != nil {
		return nil, err
	}
	f.Services = snap.Lines()
	r := &cluster.Runner{CS: cs, DC: dc, Facts: f, Snapshot: snap, Apply: apply, MetalLB: mlb, CheckTimeout: o.CheckTimeout, Reader: o.reader,
		SpeakerPodUIDs: speakerPods}
	if o.Interface != "" {
		if r.Responders, err = arpprobe.InterfaceProber(o.Interface, 500*time.Millisecond); err != nil {
			return nil, err
		}
	}
	return &Prepared{Steps: core.Plan(f), Runner: r, Import: res}, nil
}

// importFacts fills f from the import (pools, policies, BGP peers) and
// MetalLB's running speakers, and returns the speaker pods' UIDs. A MetalLB
// in both L2 and BGP mode is refused.
func importFacts(ctx context.Context, cs kubernetes.Interface, ns string, res *importer.Result, f *core.Facts) (map[string]string, error) {
	for _, p := range res.Pools {
		f.Pools = append(f.Pools, p.Metadata.Name)
	}
	f.KeepsMetalLBNodes = len(res.Policies) > 0
	for _, p := range res.Policies {
		f.Policies = append(f.Policies, p.Metadata.Name)
		f.KeepsMetalLBNodes = f.KeepsMetalLBNodes && p.Spec.Ranking == "MetalLB"
	}
	for _, p := range res.BGP.Peers {
		f.BGPPeers = append(f.BGPPeers, p.Metadata.Name)
	}
	if len(f.Policies) > 0 && len(f.BGPPeers) > 0 {
		return nil, fmt.Errorf("MetalLB announces in L2 mode (imported as L2AnnouncementPolicies %s) and in BGP mode (BGPPeers %s): `migrate metallb` hands over one mode; "+
			"hand the L2 Services over by hand first (apply the imported pools and policies, then delete MetalLB's L2Advertisements), then run it again for BGP",
			strings.Join(f.Policies, ", "), strings.Join(f.BGPPeers, ", "))
	}
	speakerPods, speakerNodes, err := cluster.SpeakerPods(ctx, cs, ns, f.Speakers)
	if err != nil {
		return nil, err
	}
	f.SpeakerNodes = speakerNodes
	return speakerPods, nil
}

// Run prepares and walks the plan.
func Run(ctx context.Context, o Options, cs kubernetes.Interface, dc dynamic.Interface, out, errOut io.Writer) error {
	st, err := Prepare(ctx, o, cs, dc, errOut)
	if err != nil {
		return err
	}
	st.Runner.Out = out
	if o.Probe != "" {
		tr := &cluster.Traffic{URL: o.Probe, Interval: o.ProbeInterval, Client: &http.Client{Timeout: o.ProbeTimeout}}
		pctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go tr.Run(pctx)
		st.Runner.Traffic = tr
		defer func() {
			ok, fail := tr.Totals()
			fmt.Fprintf(out, "traffic to %s: %d ok, %d failed\n", o.Probe, ok, fail)
		}()
	}
	fmt.Fprintf(out, "recorded %d Services' addresses; imported objects in %s; MetalLB objects will be saved to %s\n",
		len(st.Runner.Snapshot), o.ImportFile, filepath.Join(o.SaveDir, "metallb-objects.yaml"))
	err = st.Runner.Run(ctx, st.Steps)
	if err == nil && st.Runner.Traffic != nil {
		err = lastTraffic(ctx, st.Runner.Traffic, errOut)
	}
	var se *cluster.StepError
	if errors.As(err, &se) {
		fmt.Fprintf(errOut, "STOPPED at step %q: %s\nundo, in this order:\n", se.Step, se.Failed)
		for _, u := range se.Undo {
			fmt.Fprintf(errOut, "  %s\n", u)
		}
		return cliutil.ExitError{Code: 1}
	}
	return err
}

// lastTraffic fails the run when a --probe request failed after the last
// step's traffic check (one in flight then, or during the hand-off's last
// moments): every step passed, but the operator's traffic did not go
// through the migration unharmed.
func lastTraffic(ctx context.Context, tr *cluster.Traffic, errOut io.Writer) error {
	n, last, ok := tr.Drain(ctx)
	switch {
	case !ok:
		fmt.Fprintf(errOut, "the last --probe requests to %s did not finish; check the traffic totals below\n", tr.URL)
		return cliutil.ExitError{Code: 1}
	case n > 0:
		fmt.Fprintf(errOut, "every step passed, but %d requests to %s failed after the last step's traffic check (last: %s): look at what changed then (docs/migration.md)\n", n, tr.URL, last)
		return cliutil.ExitError{Code: 1}
	}
	return nil
}

// Finished is what `plan` and `run` print when no MetalLB workload is
// left in the cluster: nothing to migrate, what MetalLB left behind with
// the command that removes each, and whether the controller still runs
// --adopt-only.
type Finished struct {
	NothingToMigrate bool `json:"nothingToMigrate"`
	// ControllerAdoptOnly: the leading Mooring controller still runs
	// --adopt-only (the migration's last step restarts it without).
	ControllerAdoptOnly bool               `json:"controllerAdoptOnly"`
	Leftovers           []cluster.Leftover `json:"leftovers"`
}

// CheckFinished says whether there is anything to migrate. With MetalLB's
// workloads (DaemonSet, Deployment or Pods) anywhere there is: in
// o.Namespace it returns nil, elsewhere a usage error naming their
// namespace. With none, it returns what Finished reports.
func CheckFinished(ctx context.Context, o Options, cs kubernetes.Interface, dc dynamic.Interface) (*Finished, error) {
	o = o.withLeaseDefaults()
	snap, err := foreignlb.Read(ctx, cs, dc, time.Now())
	if err != nil {
		return nil, err
	}
	m := snap.MetalLB
	if m.Installed() {
		var nss []string
		for _, w := range slices.Concat(m.SpeakerSets, m.ControllerSets, m.Speakers, m.Controllers) {
			if w.Namespace == o.Namespace {
				return nil, nil
			}
			nss = append(nss, w.Namespace)
		}
		slices.Sort(nss)
		nss = slices.Compact(nss)
		return nil, cliutil.Usagef("--metallb-namespace %s: MetalLB is not there; its workloads are in %s: pass --metallb-namespace %s",
			o.Namespace, strings.Join(nss, ", "), nss[0])
	}
	left, err := cluster.Leftovers(ctx, cs, dc, o.Namespace)
	if err != nil {
		return nil, err
	}
	f := &Finished{NothingToMigrate: true, Leftovers: left}
	mode, err := controller.ReadMode(ctx, cs.CoordinationV1(), o.LeaseNamespace, o.LeaseName, time.Now())
	if err != nil {
		return nil, err
	}
	f.ControllerAdoptOnly = mode.Alive && mode.Published && mode.AdoptOnly
	if f.Leftovers == nil {
		f.Leftovers = []cluster.Leftover{}
	}
	return f, nil
}

// WriteText prints f for an operator.
func (f *Finished) WriteText(w io.Writer, o Options) error {
	var b strings.Builder
	b.WriteString("Nothing to migrate: no MetalLB speaker or controller (DaemonSet, Deployment or Pod) is in this cluster.\n")
	if f.ControllerAdoptOnly {
		fmt.Fprintf(&b, "The Mooring controller still runs --adopt-only (Lease %s/%s): restart it without --adopt-only (the migration's last step), so that new Services get addresses.\n",
			o.LeaseNamespace, o.LeaseName)
	}
	if len(f.Leftovers) == 0 {
		b.WriteString("Nothing of MetalLB is left.\n")
		_, err := io.WriteString(w, b.String())
		return err
	}
	fmt.Fprintf(&b, "MetalLB left %d object(s) behind; remove them in this order:\n", len(f.Leftovers))
	for _, l := range f.Leftovers {
		fmt.Fprintf(&b, "  %s\n      %s", l, l.Command)
		if l.Note != "" {
			fmt.Fprintf(&b, "   # %s", l.Note)
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
