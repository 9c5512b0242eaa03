package podipamctl

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipam"
)

// The one supported change of mode, cluster-pool → multi-pool, as an
// operator walks it (`mooring podipam migrate`) and as the lab does it:
//
//  1. PlanMigration reads the cluster and checks every precondition: the
//     recorded mode is cluster-pool, cluster-pool's CIDRs and block sizes
//     are known (the controller Deployment's flags, or given), the pool
//     "default" can hold exactly them, and every node's block lies inside.
//  2. CreateDefaultPool creates that pool (the cluster-pool controller
//     ignores PodIPPools, so this changes nothing yet).
//  3. The controller restarts with --pod-ipam-mode=multi-pool
//     (PatchController, or helm, or whoever runs it), records the change,
//     and keeps each node's block as its first block of "default"; every
//     agent exits on the recorded change and its DaemonSet restarts it.
//  4. MigrationProgress / WaitMigrated verify it from the API.
//
// These run with the operator's credentials (kubectl's), not the
// controller's: reading Deployments, creating the pool and patching the
// controller's Deployment are no part of the controller's role.

// ClusterPoolSettings are cluster-pool's CIDR lists and block sizes: what
// the pool "default" must hold so that every node keeps its block.
type ClusterPoolSettings struct {
	V4, V6         []netip.Prefix
	MaskV4, MaskV6 int
	// Source says where they were read, for the plan's text.
	Source string
}

// Default block sizes of cluster-pool (the controller's flag defaults).
const (
	defaultMaskV4 = 24
	defaultMaskV6 = 120
)

func (s ClusterPoolSettings) pool() podipam.Pool {
	return podipam.Pool{Name: DefaultPool,
		V4: podipam.FamilySpec{CIDRs: s.V4, MaskSize: s.MaskV4},
		V6: podipam.FamilySpec{CIDRs: s.V6, MaskSize: s.MaskV6}}
}

func (s ClusterPoolSettings) same(o ClusterPoolSettings) bool {
	return samePool(s.pool(), o.pool())
}

// String is the settings as the controller's flags.
func (s ClusterPoolSettings) String() string {
	var parts []string
	if len(s.V4) > 0 {
		parts = append(parts, fmt.Sprintf("--cluster-pool-ipv4-cidr=%s --cluster-pool-ipv4-mask-size=%d", joinPrefixes(s.V4), s.MaskV4))
	}
	if len(s.V6) > 0 {
		parts = append(parts, fmt.Sprintf("--cluster-pool-ipv6-cidr=%s --cluster-pool-ipv6-mask-size=%d", joinPrefixes(s.V6), s.MaskV6))
	}
	return strings.Join(parts, " ")
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

// MigrationInput says where to look.
type MigrationInput struct {
	// Namespace holds the mode ConfigMap and the controller's Deployment.
	Namespace string
	// ClusterPool, when set, is what the controller was started with (a
	// controller not run by a Deployment); with a Deployment found too,
	// both must agree.
	ClusterPool *ClusterPoolSettings
	// Deployment names the controller's Deployment; "" finds it: the one
	// Deployment of Namespace whose container runs `controller` with a
	// --pod-ipam-mode flag.
	Deployment string
}

// ControllerDeployment is the Deployment that runs the controller.
type ControllerDeployment struct {
	Namespace, Name, Container string
	// Mode is the --pod-ipam-mode it runs with now.
	Mode Mode
	// HelmRelease is the Helm release that owns it ("" when Helm does not).
	HelmRelease string
}

// NodeBlocks are one node's blocks at plan time.
type NodeBlocks struct {
	Node   string
	Blocks []netip.Prefix
}

// MigrationPlan is what PlanMigration found: the facts, and Refusals, each
// naming what is wrong and the fix. A plan with refusals must not be run.
type MigrationPlan struct {
	Namespace string
	// Recorded is the recorded mode; Done says the record already says
	// multi-pool after cluster-pool (only the verification is left).
	Recorded Mode
	Done     bool
	// NothingToDo, when set, says why there is nothing to migrate (the
	// cluster runs multi-pool and never ran cluster-pool); the plan holds
	// nothing else.
	NothingToDo string
	// ClusterPool are the settings the pool "default" is made of.
	ClusterPool ClusterPoolSettings
	// Pool is the pool "default" to create; PoolExists says it exists with
	// exactly these CIDRs and sizes.
	Pool       *mooringv1.PodIPPool
	PoolExists bool
	// Controller is nil when no Deployment runs the controller.
	Controller *ControllerDeployment
	Nodes      []NodeBlocks
	Refusals   []string
}

// ErrMigrationRefused is returned by Err when a precondition fails.
var ErrMigrationRefused = errors.New("pod IPAM migration cluster-pool → multi-pool refused")

// Err joins the refusals; nil when the plan may run.
func (p *MigrationPlan) Err() error {
	if len(p.Refusals) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrMigrationRefused, strings.Join(p.Refusals, "; "))
}

func (p *MigrationPlan) refuse(format string, a ...any) {
	p.Refusals = append(p.Refusals, fmt.Sprintf(format, a...))
}

// PlanMigration reads the mode record, the controller's Deployment, the
// PodIPPools and the PodIPAMNodes, and checks the migration. An error is a
// failed read; what stands in the way is in the plan's Refusals.
// Cost: one list of Deployments, PodIPPools and PodIPAMNodes each.
func PlanMigration(ctx context.Context, c client.Reader, in MigrationInput) (*MigrationPlan, error) {
	p := &MigrationPlan{Namespace: in.Namespace}
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: in.Namespace, Name: ModeConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		p.Recorded = ModeOff
	case err != nil:
		return nil, fmt.Errorf("read the recorded pod IPAM mode (ConfigMap %s/%s): %w", in.Namespace, ModeConfigMap, err)
	default:
		p.Recorded = Mode(cm.Data[modeKey])
	}
	switch {
	case p.Recorded == ModeClusterPool:
	case p.Recorded == ModeMultiPool && Mode(cm.Data[previousKey]) == ModeClusterPool:
		p.Done = true
	case p.Recorded == ModeMultiPool:
		p.NothingToDo = fmt.Sprintf("this cluster already runs pod IPAM mode multi-pool (ConfigMap %s/%s) and never ran cluster-pool: there is nothing to migrate", in.Namespace, ModeConfigMap)
		return p, nil
	case p.Recorded == ModeOff:
		p.refuse("no pod IPAM mode is recorded in ConfigMap %s/%s: this cluster does not run cluster-pool (is --namespace the controller's namespace?); a new cluster starts in multi-pool with --pod-ipam-mode=multi-pool, no migration needed", in.Namespace, ModeConfigMap)
	default:
		p.refuse("the recorded pod IPAM mode is %q (ConfigMap %s/%s): only cluster-pool → multi-pool is supported; %s",
			p.Recorded, in.Namespace, ModeConfigMap, RefusalMessage(p.Recorded, ModeMultiPool))
	}

	var deps appsv1.DeploymentList
	if err := c.List(ctx, &deps, client.InNamespace(in.Namespace)); err != nil {
		return nil, fmt.Errorf("list Deployments in %s to find the controller: %w", in.Namespace, err)
	}
	refused := len(p.Refusals)
	fromDeploy := p.findController(deps.Items, in.Deployment)
	switch {
	case len(p.Refusals) > refused:
		// the Deployment's problem is said
	case in.ClusterPool != nil && fromDeploy != nil && !in.ClusterPool.same(*fromDeploy):
		p.refuse("the given cluster-pool settings (%s) differ from the controller Deployment's (%s): give exactly what the controller runs with, or leave them out",
			in.ClusterPool, fromDeploy)
	case in.ClusterPool != nil && !p.Done && len(in.ClusterPool.V4)+len(in.ClusterPool.V6) == 0:
		p.refuse("the given cluster-pool settings name no CIDR: give the controller's --cluster-pool-ipv4-cidr and/or --cluster-pool-ipv6-cidr")
	case in.ClusterPool != nil:
		p.ClusterPool = *in.ClusterPool
	case fromDeploy != nil:
		p.ClusterPool = *fromDeploy
	case !p.Done:
		p.refuse("cluster-pool's CIDRs are unknown: no Deployment in %s runs the Mooring controller with --pod-ipam-mode; name it (--deployment) or give the controller's --cluster-pool-ipv4-cidr/--cluster-pool-ipv6-cidr and mask sizes", in.Namespace)
	}
	if c := p.Controller; c != nil && c.Mode != ModeClusterPool && c.Mode != ModeMultiPool {
		p.refuse("Deployment %s/%s runs the controller with --pod-ipam-mode=%s, not cluster-pool: fix the Deployment before migrating", c.Namespace, c.Name, c.Mode)
	}
	pl := p.ClusterPool.pool()
	if len(pl.V4.CIDRs)+len(pl.V6.CIDRs) > 0 {
		if err := pl.Validate(); err != nil {
			p.refuse("cluster-pool's settings (%s) do not make a valid pool: %v", p.ClusterPool, err)
		}
		p.Pool = podIPPoolOf(p.ClusterPool)
	}

	var pools mooringv1.PodIPPoolList
	if err := c.List(ctx, &pools); err != nil {
		return nil, fmt.Errorf("list PodIPPools: %w", err)
	}
	p.checkPools(pools.Items)
	var recs mooringv1.PodIPAMNodeList
	if err := c.List(ctx, &recs); err != nil {
		return nil, fmt.Errorf("list PodIPAMNodes: %w", err)
	}
	p.checkNodes(recs.Items)
	return p, nil
}

// findController finds the controller's Deployment and returns the
// cluster-pool settings of its flags (nil when none is found).
func (p *MigrationPlan) findController(deps []appsv1.Deployment, name string) *ClusterPoolSettings {
	type found struct {
		d     *appsv1.Deployment
		c     string
		flags map[string]string
	}
	var hits []found
	for i := range deps {
		d := &deps[i]
		if name != "" && d.Name != name {
			continue
		}
		for _, ct := range d.Spec.Template.Spec.Containers {
			argv := append(slices.Clone(ct.Command), ct.Args...)
			fl := controllerFlags(argv)
			if slices.Contains(argv, "controller") && fl["pod-ipam-mode"] != "" {
				hits = append(hits, found{d, ct.Name, fl})
			}
		}
	}
	switch {
	case len(hits) == 0 && name != "":
		p.refuse("Deployment %s/%s does not run the Mooring controller with --pod-ipam-mode (or does not exist): name the controller's Deployment", p.Namespace, name)
		return nil
	case len(hits) == 0:
		return nil
	case len(hits) > 1:
		var names []string
		for _, h := range hits {
			names = append(names, h.d.Name+"/"+h.c)
		}
		p.refuse("several Deployments in %s run the Mooring controller (%s): name one with --deployment", p.Namespace, strings.Join(names, ", "))
		return nil
	}
	h := hits[0]
	p.Controller = &ControllerDeployment{Namespace: h.d.Namespace, Name: h.d.Name, Container: h.c, Mode: Mode(h.flags["pod-ipam-mode"])}
	if h.d.Labels["app.kubernetes.io/managed-by"] == "Helm" {
		p.Controller.HelmRelease = h.d.Annotations["meta.helm.sh/release-name"]
	}
	s := &ClusterPoolSettings{MaskV4: defaultMaskV4, MaskV6: defaultMaskV6,
		Source: fmt.Sprintf("the flags of Deployment %s/%s", h.d.Namespace, h.d.Name)}
	for _, f := range []struct {
		flag string
		into *[]netip.Prefix
	}{{"cluster-pool-ipv4-cidr", &s.V4}, {"cluster-pool-ipv6-cidr", &s.V6}} {
		for _, c := range strings.Split(h.flags[f.flag], ",") {
			if c = strings.TrimSpace(c); c == "" {
				continue
			}
			pr, err := netip.ParsePrefix(c)
			if err != nil {
				p.refuse("Deployment %s/%s: --%s %q: %v", h.d.Namespace, h.d.Name, f.flag, c, err)
				continue
			}
			*f.into = append(*f.into, pr)
		}
	}
	for _, f := range []struct {
		flag string
		into *int
	}{{"cluster-pool-ipv4-mask-size", &s.MaskV4}, {"cluster-pool-ipv6-mask-size", &s.MaskV6}} {
		if v, ok := h.flags[f.flag]; ok {
			n, err := strconv.Atoi(v)
			if err != nil {
				p.refuse("Deployment %s/%s: --%s %q is not a number", h.d.Namespace, h.d.Name, f.flag, v)
			}
			*f.into = n
		}
	}
	return s
}

// controllerFlags reads the flags that matter here from a command line,
// --name=value or --name value, the last one winning (as pflag does).
func controllerFlags(argv []string) map[string]string {
	known := []string{"pod-ipam-mode", "cluster-pool-ipv4-cidr", "cluster-pool-ipv6-cidr", "cluster-pool-ipv4-mask-size", "cluster-pool-ipv6-mask-size"}
	out := map[string]string{}
	for i := 0; i < len(argv); i++ {
		name, value, hasValue := strings.Cut(strings.TrimLeft(argv[i], "-"), "=")
		if !strings.HasPrefix(argv[i], "-") || !slices.Contains(known, name) {
			continue
		}
		if !hasValue && i+1 < len(argv) {
			i++
			value = argv[i]
		}
		out[name] = value
	}
	return out
}

// podIPPoolOf is the pool "default" holding exactly the settings.
func podIPPoolOf(s ClusterPoolSettings) *mooringv1.PodIPPool {
	p := &mooringv1.PodIPPool{
		TypeMeta:   metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: "PodIPPool"},
		ObjectMeta: metav1.ObjectMeta{Name: DefaultPool},
	}
	if len(s.V4) > 0 {
		p.Spec.IPv4 = &mooringv1.PodIPPoolFamily{CIDRs: strings.Split(joinPrefixes(s.V4), ","), MaskSize: int32(s.MaskV4)}
	}
	if len(s.V6) > 0 {
		p.Spec.IPv6 = &mooringv1.PodIPPoolFamily{CIDRs: strings.Split(joinPrefixes(s.V6), ","), MaskSize: int32(s.MaskV6)}
	}
	return p
}

// checkPools: an existing "default" must be exactly the settings (else the
// nodes' blocks could fall outside it), and no other pool may overlap them
// (the controller would mark "default", the newer, Conflicting and cut
// nothing from it).
func (p *MigrationPlan) checkPools(pools []mooringv1.PodIPPool) {
	if p.Pool == nil {
		return
	}
	want := poolOf(p.Pool)
	for i := range pools {
		got := poolOf(&pools[i])
		if pools[i].Name == DefaultPool {
			if samePool(got, want) {
				p.PoolExists = true
				continue
			}
			p.refuse("PodIPPool %q exists with %s, not cluster-pool's %s: delete it (the migration creates it) or make it exactly cluster-pool's CIDRs and mask sizes",
				DefaultPool, describePool(got), describePool(want))
			continue
		}
		for _, f := range []podipam.Family{podipam.IPv4, podipam.IPv6} {
			for _, a := range got.Spec(f).CIDRs {
				for _, b := range want.Spec(f).CIDRs {
					if a.IsValid() && a.Overlaps(b) {
						p.refuse("PodIPPool %q holds %s, which overlaps cluster-pool's %s: the new pool %q would be marked Conflicting and cut nothing; shrink or delete %q first",
							pools[i].Name, a, b, DefaultPool, pools[i].Name)
					}
				}
			}
		}
	}
}

// samePool: the same CIDRs (in any order) and mask sizes per family.
func samePool(a, b podipam.Pool) bool {
	same := func(x, y podipam.FamilySpec) bool {
		sorted := func(ps []netip.Prefix) []netip.Prefix {
			return slices.SortedFunc(slices.Values(ps), func(p, q netip.Prefix) int {
				if c := p.Addr().Compare(q.Addr()); c != 0 {
					return c
				}
				return p.Bits() - q.Bits()
			})
		}
		return slices.Equal(sorted(x.CIDRs), sorted(y.CIDRs)) && (len(x.CIDRs) == 0 || x.MaskSize == y.MaskSize)
	}
	return same(a.V4, b.V4) && same(a.V6, b.V6)
}

func describePool(p podipam.Pool) string {
	var s []string
	for _, f := range []podipam.Family{podipam.IPv4, podipam.IPv6} {
		if fs := p.Spec(f); len(fs.CIDRs) > 0 {
			s = append(s, fmt.Sprintf("%s %s /%d", f, joinPrefixes(fs.CIDRs), fs.MaskSize))
		}
	}
	if len(s) == 0 {
		return "no CIDRs"
	}
	return strings.Join(s, ", ")
}

// checkNodes: every node's block must be a block the pool could have cut
// (inside one of its CIDRs, of its mask size), or the multi-pool
// controller would not count it as the pool's.
func (p *MigrationPlan) checkNodes(recs []mooringv1.PodIPAMNode) {
	slices.SortFunc(recs, func(a, b mooringv1.PodIPAMNode) int { return strings.Compare(a.Name, b.Name) })
	pl := p.ClusterPool.pool()
	for i := range recs {
		nb := NodeBlocks{Node: recs[i].Name}
		blocks, err := blocksOf(&recs[i])
		if err != nil {
			p.refuse("%v: fix or delete the record (its agent registers the node again)", err)
			continue
		}
		for _, b := range blocks {
			if b.Pool != DefaultPool {
				// Cut by multi-pool from another pool after the change
				// (a re-run): not the migration's to keep.
				continue
			}
			nb.Blocks = append(nb.Blocks, b.Prefix)
			if p.Pool == nil || p.Done {
				continue
			}
			fs := pl.Spec(podipam.FamilyOf(b.Prefix))
			inside := slices.ContainsFunc(fs.CIDRs, func(c netip.Prefix) bool { return c.Bits() <= b.Prefix.Bits() && c.Contains(b.Prefix.Addr()) })
			switch {
			case !inside:
				p.refuse("node %s holds block %s, outside cluster-pool's %s CIDRs %s (was a CIDR removed?): add its CIDR to the settings (--cluster-pool-%s-cidr), or drain %s and delete its PodIPAMNode so that it gets a new block",
					nb.Node, b.Prefix, podipam.FamilyOf(b.Prefix), joinPrefixes(fs.CIDRs), strings.ToLower(podipam.FamilyOf(b.Prefix).String()), nb.Node)
			case b.Prefix.Bits() != fs.MaskSize:
				p.refuse("node %s holds block %s, not a /%d (cluster-pool's %s mask size): migrate with the mask size it was cut with, or drain %s and delete its PodIPAMNode so that it gets a new block",
					nb.Node, b.Prefix, fs.MaskSize, podipam.FamilyOf(b.Prefix), nb.Node)
			}
		}
		p.Nodes = append(p.Nodes, nb)
	}
}

// CreateDefaultPool creates the plan's pool "default" unless it exists.
func CreateDefaultPool(ctx context.Context, c client.Client, p *MigrationPlan) error {
	if err := p.Err(); err != nil {
		return err
	}
	if p.PoolExists || p.Done {
		return nil
	}
	if p.Pool == nil {
		return errors.New("the plan has no pool to create")
	}
	err := c.Create(ctx, p.Pool.DeepCopy())
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("PodIPPool %q appeared after the plan was made: run the migration again to check it", DefaultPool)
	}
	if err != nil {
		return fmt.Errorf("create PodIPPool %q: %w", DefaultPool, err)
	}
	return nil
}

// PatchController sets --pod-ipam-mode=multi-pool in the controller
// Deployment's container (its rollout restarts the controller). The
// cluster-pool flags stay: multi-pool ignores them.
func PatchController(ctx context.Context, c client.Client, p *MigrationPlan) error {
	if err := p.Err(); err != nil {
		return err
	}
	if p.Controller == nil {
		return errors.New("no controller Deployment to patch")
	}
	key := client.ObjectKey{Namespace: p.Controller.Namespace, Name: p.Controller.Name}
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var d appsv1.Deployment
		if err := c.Get(ctx, key, &d); err != nil {
			return fmt.Errorf("read Deployment %s: %w", key, err)
		}
		i := slices.IndexFunc(d.Spec.Template.Spec.Containers, func(ct corev1.Container) bool { return ct.Name == p.Controller.Container })
		if i < 0 {
			return fmt.Errorf("Deployment %s has no container %q any more: run the migration again", key, p.Controller.Container)
		}
		ct := &d.Spec.Template.Spec.Containers[i]
		cmd, okCmd := setFlag(ct.Command, "pod-ipam-mode", string(ModeMultiPool))
		args, okArgs := setFlag(ct.Args, "pod-ipam-mode", string(ModeMultiPool))
		if !okCmd && !okArgs {
			args = append(args, "--pod-ipam-mode="+string(ModeMultiPool))
		}
		if slices.Equal(cmd, ct.Command) && slices.Equal(args, ct.Args) {
			return nil
		}
		ct.Command, ct.Args = cmd, args
		if err := c.Update(ctx, &d); err != nil {
			return err
		}
		return nil
	})
}

// setFlag sets every --name in argv to value; ok says one was there.
func setFlag(argv []string, name, value string) (out []string, ok bool) {
	out = slices.Clone(argv)
	for i := 0; i < len(out); i++ {
		n, _, hasValue := strings.Cut(strings.TrimLeft(out[i], "-"), "=")
		if !strings.HasPrefix(out[i], "-") || n != name {
			continue
		}
		ok = true
		if hasValue || i+1 >= len(out) {
			out[i] = "--" + name + "=" + value
		} else {
			i++
			out[i] = value
		}
	}
	return out, ok
}

// HelmUpgradeCommand is the helm command that restarts a chart-installed
// controller in multi-pool (chart is the chart reference the release was
// installed from). --reuse-values keeps every other value.
func HelmUpgradeCommand(p *MigrationPlan, chart string) string {
	release, ns := "RELEASE", p.Namespace
	if p.Controller != nil && p.Controller.HelmRelease != "" {
		release, ns = p.Controller.HelmRelease, p.Controller.Namespace
	}
	return fmt.Sprintf("helm upgrade %s %s -n %s --reuse-values --set controller.flags.podIpamMode=%s", release, chart, ns, ModeMultiPool)
}

// NodeProgress is one node's state after the switch.
type NodeProgress struct {
	Node string
	// Gone: the node's record was deleted meanwhile (nothing to check).
	Gone bool
	// Mode is the mode its blocks were last recorded in (status.mode).
	Mode Mode
	// Missing are blocks of the plan no longer held as blocks of "default".
	Missing []netip.Prefix
	// Registered: its agent wrote a multi-pool demand for "default".
	Registered bool
}

// Done says the node is migrated.
func (n NodeProgress) Done() bool {
	return n.Gone || n.Mode == ModeMultiPool && len(n.Missing) == 0 && n.Registered
}

// MigrationProgress is the migration as the API shows it.
type MigrationProgress struct {
	Recorded Mode
	Nodes    []NodeProgress
}

// Done says the recorded mode is multi-pool and every node is migrated.
func (m MigrationProgress) Done() bool {
	if m.Recorded != ModeMultiPool {
		return false
	}
	for _, n := range m.Nodes {
		if !n.Done() {
			return false
		}
	}
	return true
}

// CheckMigration reads how far the plan's migration is.
// Cost: one ConfigMap read and one list of PodIPAMNodes.
func CheckMigration(ctx context.Context, c client.Reader, p *MigrationPlan) (MigrationProgress, error) {
	var out MigrationProgress
	mode, err := RecordedMode(ctx, c, p.Namespace)
	if err != nil {
		return out, err
	}
	out.Recorded = mode
	var recs mooringv1.PodIPAMNodeList
	if err := c.List(ctx, &recs); err != nil {
		return out, fmt.Errorf("list PodIPAMNodes: %w", err)
	}
	byName := map[string]*mooringv1.PodIPAMNode{}
	for i := range recs.Items {
		byName[recs.Items[i].Name] = &recs.Items[i]
	}
	for _, nb := range p.Nodes {
		np := NodeProgress{Node: nb.Node}
		rec, ok := byName[nb.Node]
		if !ok {
			np.Gone = true
			out.Nodes = append(out.Nodes, np)
			continue
		}
		np.Mode = Mode(rec.Status.Mode)
		for _, b := range nb.Blocks {
			if !slices.ContainsFunc(rec.Status.Blocks, func(s mooringv1.PodIPAMBlock) bool {
				return (s.Pool == DefaultPool || s.Pool == "") && s.CIDR == b.String()
			}) {
				np.Missing = append(np.Missing, b)
			}
		}
		np.Registered = slices.ContainsFunc(rec.Spec.Requests, func(r mooringv1.PodIPAMRequest) bool { return r.Pool == DefaultPool })
		out.Nodes = append(out.Nodes, np)
	}
	return out, nil
}

// WaitMigrated polls CheckMigration every interval until the migration is
// done or ctx ends; progress, when not nil, sees every check whose result
// changed. It returns the last progress, and ctx's error when not done.
func WaitMigrated(ctx context.Context, c client.Reader, p *MigrationPlan, interval time.Duration, progress func(MigrationProgress)) (MigrationProgress, error) {
	var last MigrationProgress
	seen := ""
	for {
		m, err := CheckMigration(ctx, c, p)
		if err == nil {
			last = m
			if sig := fmt.Sprint(m); sig != seen && progress != nil {
				seen = sig
				progress(m)
			}
			if m.Done() {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return last, fmt.Errorf("%w (last check: %v)", context.Cause(ctx), err)
			}
			return last, context.Cause(ctx)
		case <-time.After(interval):
		}
	}
}
