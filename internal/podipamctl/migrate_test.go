package podipamctl_test

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// controllerDeployment is a Deployment running the controller the way the
// chart renders it (args "controller" then --flag=value), Helm's marks
// included when release is set.
func controllerDeployment(name, release string, args ...string) *appsv1.Deployment {
	labels := map[string]string{"app": name}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{
					{Name: "sidecar", Image: "example.invalid/sidecar", Args: []string{"run"}},
					{Name: "controller", Image: "example.invalid/mooring", Args: append([]string{"controller"}, args...)},
				}},
			},
		},
	}
	if release != "" {
		d.Labels["app.kubernetes.io/managed-by"] = "Helm"
		d.Annotations = map[string]string{"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": ns}
	}
	return d
}

func create(t testing.TB, c client.Client, objs ...client.Object) {
	t.Helper()
	for _, o := range objs {
		if err := c.Create(context.Background(), o); err != nil {
			t.Fatal(err)
		}
	}
}

// TestMigratePlanAndRun walks the migration as `mooring podipam migrate`
// does against a real API server: a cluster-pool controller cuts the
// blocks; the plan reads cluster-pool's settings from the chart-rendered
// Deployment (a --flag value pair and a later --flag=value overriding an
// earlier one included), creates exactly that pool "default", patches
// the Deployment's mode; the multi-pool controller and the agents (stood
// in for) then make the wait end, after it reported the nodes not done.
func TestMigratePlanAndRun(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	cp := podipamctl.Config{Mode: podipamctl.ModeClusterPool,
		ClusterPoolV4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, MaskV4: 24,
		ClusterPoolV6: []netip.Prefix{netip.MustParsePrefix("fd00:244::/112")}, MaskV6: 120}
	if err := podipamctl.LockMode(ctx, c, ns, cp.Mode, "test"); err != nil {
		t.Fatal(err)
	}
	create(t, c, controllerDeployment("mooring-controller", "mooring",
		"--lease-namespace=mooring-system", "--pod-ipam-mode=cluster-pool",
		"--cluster-pool-ipv4-cidr=10.9.0.0/16", "--cluster-pool-ipv4-cidr", "10.244.0.0/16",
		"--cluster-pool-ipv6-cidr=fd00:244::/112", "--cluster-pool-ipv6-mask-size=120"))
	other := controllerDeployment("unrelated", "")
	other.Spec.Template.Spec.Containers[1].Args = []string{"serve", "--pod-ipam-mode=multi-pool"}
	create(t, c, other)
	mkNode(t, c, "node-1")
	mkNode(t, c, "node-2")
	stop := startPodIPAM(t, e, cp)
	before := map[string][]netip.Prefix{}
	for _, n := range []string{"node-1", "node-2"} {
		eventually(t, 30*time.Second, n, func() error {
			if b := blocks(t, c, n, "default"); len(b) != 2 {
				return fmt.Errorf("blocks %v", b)
			}
			before[n] = blocks(t, c, n, "default")
			return nil
		})
	}

	plan, err := podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := plan.Err(); err != nil {
		t.Fatalf("refused: %v", err)
	}
	if plan.Recorded != podipamctl.ModeClusterPool || plan.Done || plan.PoolExists {
		t.Errorf("plan: recorded %q, done %v, pool exists %v", plan.Recorded, plan.Done, plan.PoolExists)
	}
	if ct := plan.Controller; ct == nil || ct.Name != "mooring-controller" || ct.Container != "controller" || ct.HelmRelease != "mooring" || ct.Mode != podipamctl.ModeClusterPool {
		t.Fatalf("controller found: %+v", plan.Controller)
	}
	if got, want := plan.ClusterPool.String(), "--cluster-pool-ipv4-cidr=10.244.0.0/16 --cluster-pool-ipv4-mask-size=24 --cluster-pool-ipv6-cidr=fd00:244::/112 --cluster-pool-ipv6-mask-size=120"; got != want {
		t.Errorf("cluster-pool settings %q, want %q", got, want)
	}
	if len(plan.Nodes) != 2 || !slices.Equal(plan.Nodes[0].Blocks, before["node-1"]) || !slices.Equal(plan.Nodes[1].Blocks, before["node-2"]) {
		t.Errorf("plan's nodes %+v, blocks %v", plan.Nodes, before)
	}
	if got, want := podipamctl.HelmUpgradeCommand(plan, "charts/mooring"), "helm upgrade mooring charts/mooring -n mooring-system --reuse-values --set controller.flags.podIpamMode=multi-pool"; got != want {
		t.Errorf("helm command %q, want %q", got, want)
	}

	if err := podipamctl.CreateDefaultPool(ctx, c, plan); err != nil {
		t.Fatal(err)
	}
	p := pool(t, c, "default")
	if p.Spec.IPv4 == nil || !slices.Equal(p.Spec.IPv4.CIDRs, []string{"10.244.0.0/16"}) || p.Spec.IPv4.MaskSize != 24 ||
		p.Spec.IPv6 == nil || !slices.Equal(p.Spec.IPv6.CIDRs, []string{"fd00:244::/112"}) || p.Spec.IPv6.MaskSize != 120 {
		t.Errorf("pool default: %+v", p.Spec)
	}
	if err := podipamctl.PatchController(ctx, c, plan); err != nil {
		t.Fatal(err)
	}
	var d appsv1.Deployment
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "mooring-controller"}, &d); err != nil {
		t.Fatal(err)
	}
	args := d.Spec.Template.Spec.Containers[1].Args
	if !slices.Contains(args, "--pod-ipam-mode=multi-pool") || slices.Contains(args, "--pod-ipam-mode=cluster-pool") || !slices.Contains(args, "10.244.0.0/16") {
		t.Errorf("args after the patch: %q", args)
	}
	if got := d.Spec.Template.Spec.Containers[0].Args; !slices.Equal(got, []string{"run"}) {
		t.Errorf("the other container's args changed: %q", got)
	}

	// Run again now: the plan still passes (the pool is the one it made).
	again, err := podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: ns})
	if err != nil || again.Err() != nil || !again.PoolExists || again.Controller.Mode != podipamctl.ModeMultiPool {
		t.Fatalf("second plan: %v, %v, pool exists %v, %+v", err, again.Err(), again.PoolExists, again.Controller)
	}

	// The Deployment's rollout, stood in for: the controller restarts in
	// multi-pool; each agent restarts and writes its multi-pool demand.
	stop()
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})
	var seen []podipamctl.MigrationProgress
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := podipamctl.WaitMigrated(wctx, c, plan, 50*time.Millisecond, func(m podipamctl.MigrationProgress) { seen = append(seen, m) })
		done <- err
	}()
	time.Sleep(500 * time.Millisecond)
	for _, n := range []string{"node-1", "node-2"} {
		// A merge patch: the controller writes the record's status at
		// the same time, so a Get + Update could meet a conflict.
		r := record(t, c, n)
		base := r.DeepCopy()
		r.Spec.Requests = []mooringv1.PodIPAMRequest{{Pool: "default", IPv4Addresses: 8, IPv6Addresses: 8}}
		if err := c.Patch(ctx, r, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatalf("wait: %v; seen %+v", err, seen)
	}
	if len(seen) < 2 || seen[0].Done() {
		t.Errorf("progress reports: %+v (want a not-done one first)", seen)
	}
	for _, np := range seen[len(seen)-1].Nodes {
		if np.Mode != podipamctl.ModeMultiPool || !np.Registered || len(np.Missing) > 0 {
			t.Errorf("%+v", np)
		}
	}
	final, err := podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: ns})
	if err != nil || final.Err() != nil || !final.Done {
		t.Errorf("plan after the migration: %v, %v, done %v", err, final.Err(), final.Done)
	}

	// Later a node gets a block of another pool; a re-run's check must
	// still see the migration done (it judges only default's blocks).
	mkPool(t, c, "blue", []string{"10.250.0.0/16"}, 26, nil, 0)
	r := record(t, c, "node-1")
	base := r.DeepCopy()
	r.Spec.Requests = append(r.Spec.Requests, mooringv1.PodIPAMRequest{Pool: "blue", IPv4Addresses: 4})
	if err := c.Patch(ctx, r, client.MergeFrom(base)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "node-1 holds a block of blue", func() error {
		if bs := record(t, c, "node-1").Status.Blocks; !slices.ContainsFunc(bs, func(b mooringv1.PodIPAMBlock) bool { return b.Pool == "blue" }) {
			return fmt.Errorf("blocks %+v", bs)
		}
		return nil
	})
	rerun, err := podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: ns})
	if err != nil || rerun.Err() != nil || !rerun.Done {
		t.Fatalf("plan of a re-run: %v, %v, done %v", err, rerun.Err(), rerun.Done)
	}
	progress, err := podipamctl.CheckMigration(ctx, c, rerun)
	if err != nil || !progress.Done() {
		t.Errorf("a re-run's check with another pool's block: %v, %+v", err, progress)
	}
}

// TestMigrateRefusals: each precondition that fails refuses the plan with
// a message naming the fix, and CreateDefaultPool then writes nothing.
func TestMigrateRefusals(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	given := &podipamctl.ClusterPoolSettings{V4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, MaskV4: 24, Source: "test"}
	setMode := func(mode podipamctl.Mode) {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podipamctl.ModeConfigMap}}
		_ = c.Delete(ctx, cm)
		if mode != podipamctl.ModeOff {
			cm.Data = map[string]string{"mode": string(mode)}
			create(t, c, cm)
		}
	}
	for _, tc := range []struct {
		name  string
		mode  podipamctl.Mode
		in    podipamctl.MigrationInput
		objs  []client.Object
		nodes map[string][]string
		want  []string
	}{
		{name: "kubernetes recorded", mode: podipamctl.ModeKubernetes, in: podipamctl.MigrationInput{ClusterPool: given},
			want: []string{`recorded pod IPAM mode is "kubernetes"`, "only cluster-pool → multi-pool is supported"}},
		{name: "nothing recorded", mode: podipamctl.ModeOff, in: podipamctl.MigrationInput{ClusterPool: given},
			want: []string{"no pod IPAM mode is recorded", "--pod-ipam-mode=multi-pool, no migration needed"}},
		{name: "settings unknown", mode: podipamctl.ModeClusterPool,
			want: []string{"cluster-pool's CIDRs are unknown", "(--deployment)", "--cluster-pool-ipv4-cidr"}},
		{name: "given settings without a CIDR", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{ClusterPool: &podipamctl.ClusterPoolSettings{MaskV4: 24, Source: "test"}},
			want: []string{"the given cluster-pool settings name no CIDR", "--cluster-pool-ipv4-cidr"}},
		{name: "named Deployment missing", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{Deployment: "nope"},
			want: []string{"Deployment mooring-system/nope does not run the Mooring controller"}},
		{name: "two controllers", mode: podipamctl.ModeClusterPool,
			objs: []client.Object{controllerDeployment("a", "", "--pod-ipam-mode=cluster-pool", "--cluster-pool-ipv4-cidr=10.244.0.0/16"),
				controllerDeployment("b", "", "--pod-ipam-mode", "cluster-pool")},
			want: []string{"several Deployments in mooring-system run the Mooring controller (a/controller, b/controller)", "--deployment"}},
		{name: "given differs from the Deployment", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{ClusterPool: given},
			objs: []client.Object{controllerDeployment("a", "", "--pod-ipam-mode=cluster-pool", "--cluster-pool-ipv4-cidr=10.244.0.0/16", "--cluster-pool-ipv4-mask-size=26")},
			want: []string{"differ from the controller Deployment's", "--cluster-pool-ipv4-mask-size=26"}},
		{name: "Deployment in another mode", mode: podipamctl.ModeClusterPool,
			objs: []client.Object{controllerDeployment("a", "", "--pod-ipam-mode=kubernetes", "--cluster-pool-ipv4-cidr=10.244.0.0/16")},
			want: []string{"runs the controller with --pod-ipam-mode=kubernetes, not cluster-pool"}},
		{name: "invalid settings", mode: podipamctl.ModeClusterPool,
			in:   podipamctl.MigrationInput{ClusterPool: &podipamctl.ClusterPoolSettings{V4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, MaskV4: 8}},
			want: []string{"do not make a valid pool"}},
		{name: "another default pool", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{ClusterPool: given},
			objs: []client.Object{&mooringv1.PodIPPool{ObjectMeta: metav1.ObjectMeta{Name: "default"},
				Spec: mooringv1.PodIPPoolSpec{IPv4: &mooringv1.PodIPPoolFamily{CIDRs: []string{"10.244.0.0/16"}, MaskSize: 26}}}},
			want: []string{`PodIPPool "default" exists with IPv4 10.244.0.0/16 /26, not cluster-pool's IPv4 10.244.0.0/16 /24`, "delete it"}},
		{name: "overlapping pool", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{ClusterPool: given},
			objs: []client.Object{&mooringv1.PodIPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
				Spec: mooringv1.PodIPPoolSpec{IPv4: &mooringv1.PodIPPoolFamily{CIDRs: []string{"10.244.128.0/17"}, MaskSize: 26}}}},
			want: []string{`PodIPPool "blue" holds 10.244.128.0/17, which overlaps cluster-pool's 10.244.0.0/16`, `shrink or delete "blue"`}},
		{name: "block outside", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{ClusterPool: given},
			nodes: map[string][]string{"node-1": {"10.244.3.0/24"}, "node-2": {"10.9.0.0/24"}},
			want:  []string{"node node-2 holds block 10.9.0.0/24, outside cluster-pool's IPv4 CIDRs 10.244.0.0/16", "--cluster-pool-ipv4-cidr", "drain node-2"}},
		{name: "block of another size", mode: podipamctl.ModeClusterPool, in: podipamctl.MigrationInput{ClusterPool: given},
			nodes: map[string][]string{"node-3": {"10.244.7.0/25"}},
			want:  []string{"node node-3 holds block 10.244.7.0/25, not a /24", "drain node-3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			setMode(tc.mode)
			create(t, c, tc.objs...)
			var cleanup []client.Object
			cleanup = append(cleanup, tc.objs...)
			for n, cidrs := range tc.nodes {
				r := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
				create(t, c, r)
				for _, b := range cidrs {
					r.Status.Blocks = append(r.Status.Blocks, mooringv1.PodIPAMBlock{Pool: "default", CIDR: b})
				}
				r.Status.Mode = "cluster-pool"
				if err := c.Status().Update(ctx, r); err != nil {
					t.Fatal(err)
				}
				cleanup = append(cleanup, r)
			}
			defer func() {
				for _, o := range cleanup {
					_ = c.Delete(ctx, o)
				}
			}()
			in := tc.in
			in.Namespace = ns
			plan, err := podipamctl.PlanMigration(ctx, c, in)
			if err != nil {
				t.Fatal(err)
			}
			err = plan.Err()
			if err == nil {
				t.Fatalf("not refused: %+v", plan)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("refusal lacks %q:\n%v", w, err)
				}
			}
			if err := podipamctl.CreateDefaultPool(ctx, c, plan); err == nil {
				t.Error("CreateDefaultPool ran a refused plan")
			}
			if err := podipamctl.PatchController(ctx, c, plan); err == nil {
				t.Error("PatchController ran a refused plan")
			}
		})
	}
	// And a plan that passes, given the settings (no Deployment: the lab).
	setMode(podipamctl.ModeClusterPool)
	plan, err := podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: ns, ClusterPool: given})
	if err != nil || plan.Err() != nil || plan.Controller != nil || plan.Pool == nil || plan.Pool.Spec.IPv6 != nil {
		t.Fatalf("plan with given settings: %v, %v, %+v", err, plan.Err(), plan)
	}

	// A controller run as `mooring controller` with "--flag value" pairs:
	// found, agreeing with the given settings (CIDRs in another order),
	// and patched in the same form.
	d := controllerDeployment("plain", "")
	d.Spec.Template.Spec.Containers[1].Command = []string{"/mooring", "controller"}
	d.Spec.Template.Spec.Containers[1].Args = []string{"--pod-ipam-mode", "cluster-pool", "--cluster-pool-ipv4-cidr", "10.250.0.0/16,10.244.0.0/16"}
	create(t, c, d)
	two := &podipamctl.ClusterPoolSettings{V4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("10.250.0.0/16")}, MaskV4: 24}
	plan, err = podipamctl.PlanMigration(ctx, c, podipamctl.MigrationInput{Namespace: ns, ClusterPool: two})
	if err != nil || plan.Err() != nil || plan.Controller == nil || plan.Controller.HelmRelease != "" {
		t.Fatalf("plan with a plain Deployment: %v, %v, %+v", err, plan.Err(), plan.Controller)
	}
	if err := podipamctl.PatchController(ctx, c, plan); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(d), d); err != nil {
		t.Fatal(err)
	}
	if got := d.Spec.Template.Spec.Containers[1].Args; !slices.Equal(got, []string{"--pod-ipam-mode", "multi-pool", "--cluster-pool-ipv4-cidr", "10.250.0.0/16,10.244.0.0/16"}) {
		t.Errorf("args after the patch: %q", got)
	}
}
