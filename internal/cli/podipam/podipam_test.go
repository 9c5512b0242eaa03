package podipam_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/cli"
	"github.com/mooringlb/mooring/internal/cli/podipam"
	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

const ns = "mooring-system"

// Mistakes in the command line are usage errors (exit 2) that say the fix.
func TestMigrateUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"podipam", "migrate"}, "--to is required: --to=multi-pool"},
		{[]string{"podipam", "migrate", "--to=kubernetes"}, "--to=kubernetes: only cluster-pool → multi-pool is supported"},
		{[]string{"podipam", "migrate", "--to=multi-pool", "--controller-update=kubectl"}, `--controller-update "kubectl": use auto, patch, helm or manual`},
		{[]string{"podipam", "migrate", "--to=multi-pool", "--cluster-pool-ipv4-mask-size=26"}, "needs its --cluster-pool-*-cidr"},
	} {
		var out, errb bytes.Buffer
		code := cli.Main(context.Background(), append([]string{cli.Name}, tc.args...), cli.Streams{In: strings.NewReader(""), Out: &out, Err: &errb})
		if code != 2 || out.Len() > 0 || !strings.Contains(errb.String(), tc.want) || !strings.Contains(errb.String(), "Run 'mooring podipam migrate --help'") {
			t.Errorf("%v: exit %d, stdout %q, stderr:\n%s\nwant %q", tc.args, code, out.String(), errb.String(), tc.want)
		}
	}
}

type fixture struct {
	t   *testing.T
	ctx context.Context
	c   client.Client
}

func (f *fixture) create(objs ...client.Object) {
	f.t.Helper()
	for _, o := range objs {
		if err := f.c.Create(f.ctx, o); err != nil {
			f.t.Fatal(err)
		}
	}
}

func (f *fixture) run(o podipam.Options) (code int, stdout, stderr string) {
	f.t.Helper()
	o.Namespace, o.To, o.Chart, o.Interval = ns, "multi-pool", "charts/mooring", 50*time.Millisecond
	if o.Update == "" {
		o.Update = podipam.UpdateAuto
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	var out, errb bytes.Buffer
	err := podipam.Run(f.ctx, o, f.c, &out, &errb)
	var ee cliutil.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		code = ee.Code
	default:
		f.t.Fatalf("run: %v\n%s%s", err, out.String(), errb.String())
	}
	return code, out.String(), errb.String()
}

func contains(t *testing.T, what, s string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

// TestMigrateMessages runs the verb against a real API server holding a
// chart-installed cluster-pool controller (its Deployment with Helm's
// marks) and two nodes' records: the dry run, a refusal, a run that
// patches and whose --wait runs out naming what each node lacks, and a
// --wait that sees the migration done (controller and agents stood in
// for by writing what they write).
func TestMigrateMessages(t *testing.T) {
	e := testenv.StartT(t)
	f := &fixture{t: t, ctx: context.Background(), c: e.Client}
	f.create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: podipamctl.ModeConfigMap}, Data: map[string]string{"mode": "cluster-pool"}})
	labels := map[string]string{"app.kubernetes.io/name": "mooring"}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mooring-controller",
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": "mooring"}},
		Spec: appsv1.DeploymentSpec{Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "controller", Image: "example.invalid/mooring",
					Args: []string{"controller", "--cluster-pool-ipv4-cidr=10.244.0.0/16", "--cluster-pool-ipv4-mask-size=24", "--pod-ipam-mode=cluster-pool"}}}}}},
	}
	f.create(dep)
	for i, n := range []string{"node-1", "node-2"} {
		r := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: n}}
		f.create(r)
		r.Status = mooringv1.PodIPAMNodeStatus{Mode: "cluster-pool", Blocks: []mooringv1.PodIPAMBlock{{Pool: "default", CIDR: []string{"10.244.0.0/24", "10.244.1.0/24"}[i]}}}
		if err := f.c.Status().Update(f.ctx, r); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("dry run", func(t *testing.T) {
		code, out, errs := f.run(podipam.Options{DryRun: true})
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		contains(t, "dry run", out,
			"recorded mode       cluster-pool",
			"cluster-pool        --cluster-pool-ipv4-cidr=10.244.0.0/16 --cluster-pool-ipv4-mask-size=24 (from the flags of Deployment mooring-system/mooring-controller)",
			`Deployment mooring-system/mooring-controller, container controller, --pod-ipam-mode=cluster-pool, Helm release "mooring"`,
			"node node-1         10.244.0.0/24",
			`1. create PodIPPool "default": ipv4 10.244.0.0/16 maskSize 24`,
			"2. you run: helm upgrade mooring charts/mooring -n mooring-system --reuse-values --set controller.flags.podIpamMode=multi-pool",
			"dry run: nothing was changed.")
		var p mooringv1.PodIPPool
		if err := f.c.Get(f.ctx, client.ObjectKey{Name: "default"}, &p); !apierrors.IsNotFound(err) {
			t.Errorf("the dry run created the pool: %v", err)
		}
	})

	t.Run("refused", func(t *testing.T) {
		blue := &mooringv1.PodIPPool{ObjectMeta: metav1.ObjectMeta{Name: "blue"},
			Spec: mooringv1.PodIPPoolSpec{IPv4: &mooringv1.PodIPPoolFamily{CIDRs: []string{"10.244.200.0/24"}, MaskSize: 26}}}
		f.create(blue)
		defer func() { _ = f.c.Delete(f.ctx, blue) }()
		code, out, errs := f.run(podipam.Options{})
		if code != 1 {
			t.Fatalf("exit %d", code)
		}
		contains(t, "stderr", errs, "refused: nothing was changed. Fix the following and run again:",
			`  - PodIPPool "blue" holds 10.244.200.0/24, which overlaps cluster-pool's 10.244.0.0/16`, `shrink or delete "blue" first`)
		if strings.Contains(out, "Steps:") {
			t.Errorf("a refused plan printed steps:\n%s", out)
		}
	})

	t.Run("patch, wait runs out", func(t *testing.T) {
		code, out, errs := f.run(podipam.Options{Update: podipam.UpdatePatch, Wait: true, Timeout: 10 * time.Second})
		if code != 1 {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		contains(t, "stdout", out, `created PodIPPool "default"`,
			"patched Deployment mooring-system/mooring-controller: --pod-ipam-mode=multi-pool",
			"waiting up to 10s", "  recorded mode: cluster-pool")
		contains(t, "stderr", errs, `warning: Helm release "mooring" still says cluster-pool: set controller.flags.podIpamMode=multi-pool`,
			"not migrated after 10s:", `the recorded mode is still "cluster-pool": the controller has not started with --pod-ipam-mode=multi-pool`,
			"  - node-1: waiting: blocks kept, still recorded in cluster-pool (the controller has not re-recorded it), agent not re-registered yet")
		var d appsv1.Deployment
		if err := f.c.Get(f.ctx, client.ObjectKeyFromObject(dep), &d); err != nil {
			t.Fatal(err)
		}
		if args := d.Spec.Template.Spec.Containers[0].Args; !slices.Contains(args, "--pod-ipam-mode=multi-pool") {
			t.Errorf("args %q", args)
		}
	})

	t.Run("wait sees it done", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: podipamctl.ModeConfigMap}, &cm); err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"mode": "multi-pool", "previous": "cluster-pool"}
		if err := f.c.Update(f.ctx, &cm); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{"node-1", "node-2"} {
			var r mooringv1.PodIPAMNode
			if err := f.c.Get(f.ctx, client.ObjectKey{Name: n}, &r); err != nil {
				t.Fatal(err)
			}
			r.Spec.Requests = []mooringv1.PodIPAMRequest{{Pool: "default", IPv4Addresses: 8}}
			if err := f.c.Update(f.ctx, &r); err != nil {
				t.Fatal(err)
			}
			r.Status.Mode = "multi-pool"
			if err := f.c.Status().Update(f.ctx, &r); err != nil {
				t.Fatal(err)
			}
		}
		code, out, errs := f.run(podipam.Options{Wait: true})
		if code != 0 || errs != "" {
			t.Fatalf("exit %d\n%s\n%s", code, out, errs)
		}
		contains(t, "stdout", out, "The mode record already says multi-pool",
			"the controller's Deployment already runs --pod-ipam-mode=multi-pool",
			"node-1               done: blocks kept, recorded in multi-pool, agent re-registered",
			`migrated: pod IPAM mode multi-pool; 2 node(s) kept their blocks as blocks of "default" and their agents re-registered`)
	})

	// A cluster that runs multi-pool and never ran cluster-pool: the dry
	// run says plainly there is nothing to do (it used to refuse, telling
	// the operator to start the controller with the mode it already has).
	t.Run("multi-pool from the start: nothing to do", func(t *testing.T) {
		var cm corev1.ConfigMap
		if err := f.c.Get(f.ctx, client.ObjectKey{Namespace: ns, Name: podipamctl.ModeConfigMap}, &cm); err != nil {
			t.Fatal(err)
		}
		cm.Data = map[string]string{"mode": "multi-pool"}
		if err := f.c.Update(f.ctx, &cm); err != nil {
			t.Fatal(err)
		}
		code, out, errs := f.run(podipam.Options{DryRun: true})
		if code != 0 || errs != "" {
			t.Fatalf("exit %d, stderr %s", code, errs)
		}
		contains(t, "stdout", out, "nothing to do: this cluster already runs pod IPAM mode multi-pool (ConfigMap mooring-system/mooring-pod-ipam-mode) and never ran cluster-pool: there is nothing to migrate.")
		for _, bad := range []string{"refus", "Steps:", "Fix"} {
			if strings.Contains(out, bad) {
				t.Errorf("stdout says %q:\n%s", bad, out)
			}
		}
	})
}
