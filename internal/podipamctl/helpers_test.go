package podipamctl_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

const ns = "mooring-system"

func TestMain(m *testing.M) {
	kube.BridgeLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}

func startEnv(t testing.TB) *testenv.Env {
	t.Helper()
	e := testenv.StartT(t)
	e.Config.QPS, e.Config.Burst = 1000, 2000
	if err := e.Client.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	return e
}

// startPodIPAM runs the pod IPAM controller side alone in a manager and
// returns a stop function that waits for it to end.
func startPodIPAM(t testing.TB, e *testenv.Env, cfg podipamctl.Config) func() {
	t.Helper()
	return startPodIPAMAs(t, e.Config, cfg)
}

// startPodIPAMAs is startPodIPAM with other credentials; a nil cfg.Log
// logs warnings to stderr.
func startPodIPAMAs(t testing.TB, rc *rest.Config, cfg podipamctl.Config) func() {
	t.Helper()
	cfg.Namespace = ns
	if cfg.StatusInterval == 0 {
		cfg.StatusInterval = 100 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	mgr, err := ctrl.NewManager(rc, ctrl.Options{
		Logger:                 logr.FromSlogHandler(cfg.Log.Handler()),
		Scheme:                 kube.Scheme(),
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Controller:             config.Controller{SkipNameValidation: ptr.To(true)},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := podipamctl.Setup(mgr, cfg); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	stopped := false
	stop := func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

// mkNode creates a Node and, standing in for its agent, registers it for
// pod IPAM (its PodIPAMNode, empty demand).
func mkNode(t testing.TB, c client.Client, name string, podCIDRs ...string) {
	t.Helper()
	mkBareNode(t, c, name, podCIDRs...)
	rec := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := c.Create(context.Background(), rec); err != nil {
		t.Fatal(err)
	}
}

// mkBareNode creates a Node only: the test's agent (RunNode) registers it.
func mkBareNode(t testing.TB, c client.Client, name string, podCIDRs ...string) *corev1.Node {
	t.Helper()
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if len(podCIDRs) > 0 {
		n.Spec.PodCIDR, n.Spec.PodCIDRs = podCIDRs[0], podCIDRs
	}
	if err := c.Create(context.Background(), n); err != nil {
		t.Fatal(err)
	}
	return n
}

func mkPool(t testing.TB, c client.Client, name string, v4 []string, m4 int32, v6 []string, m6 int32) {
	t.Helper()
	p := &mooringv1.PodIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if len(v4) > 0 {
		p.Spec.IPv4 = &mooringv1.PodIPPoolFamily{CIDRs: v4, MaskSize: m4}
	}
	if len(v6) > 0 {
		p.Spec.IPv6 = &mooringv1.PodIPPoolFamily{CIDRs: v6, MaskSize: m6}
	}
	if err := c.Create(context.Background(), p); err != nil {
		t.Fatal(err)
	}
}

// eventually polls cond until it returns nil or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func record(t testing.TB, c client.Client, node string) *mooringv1.PodIPAMNode {
	t.Helper()
	var r mooringv1.PodIPAMNode
	if err := c.Get(context.Background(), client.ObjectKey{Name: node}, &r); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	return &r
}

// blocks returns a node's recorded blocks of pool ("" = all).
func blocks(t testing.TB, c client.Client, node, pool string) []netip.Prefix {
	t.Helper()
	var out []netip.Prefix
	for _, b := range record(t, c, node).Status.Blocks {
		if pool == "" || b.Pool == pool {
			out = append(out, netip.MustParsePrefix(b.CIDR))
		}
	}
	return out
}

func families(ps []netip.Prefix) (v4, v6 int) {
	for _, p := range ps {
		if p.Addr().Is4() {
			v4++
		} else {
			v6++
		}
	}
	return v4, v6
}

// noOverlap fails when two nodes' blocks overlap.
func noOverlap(t testing.TB, c client.Client) {
	t.Helper()
	var list mooringv1.PodIPAMNodeList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var all []netip.Prefix
	for _, n := range list.Items {
		for _, b := range n.Status.Blocks {
			p := netip.MustParsePrefix(b.CIDR)
			if slices.ContainsFunc(all, p.Overlaps) {
				t.Fatalf("block %s of %s overlaps another node's block", p, n.Name)
			}
			all = append(all, p)
		}
	}
}

func events(t testing.TB, c client.Client, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := c.List(context.Background(), &list); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func metavObj(name string) metav1.ObjectMeta { return metav1.ObjectMeta{Name: name} }
