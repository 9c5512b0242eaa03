package podipamctl_test

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestModeLock proves on a real apiserver that the mode is recorded at the
// first start that enables pod IPAM, that only cluster-pool → multi-pool
// is accepted afterwards, and that every other change is refused with a
// message naming the recorded mode and the supported path, plus an Event.
func TestModeLock(t *testing.T) {
	e := startEnv(t)
	t.Run("refused before leader election", func(t *testing.T) { refusesBeforeLeaderElection(t, e) })
	ctx := context.Background()
	c := e.Client
	steps := []struct {
		mode    podipamctl.Mode
		wantErr string
		after   podipamctl.Mode
	}{
		{podipamctl.ModeOff, "", podipamctl.ModeOff}, // off records nothing
		{podipamctl.ModeClusterPool, "", podipamctl.ModeClusterPool},
		{podipamctl.ModeClusterPool, "", podipamctl.ModeClusterPool},
		{podipamctl.ModeKubernetes, "running pods hold addresses from Mooring's blocks", podipamctl.ModeClusterPool},
		{podipamctl.ModeOff, "no new node would get a pod address block", podipamctl.ModeClusterPool},
		{podipamctl.ModeMultiPool, "", podipamctl.ModeMultiPool}, // the supported migration
		{podipamctl.ModeClusterPool, "per-namespace pools would silently stop applying", podipamctl.ModeMultiPool},
	}
	for i, s := range steps {
		err := podipamctl.LockMode(ctx, c, ns, s.mode, "test")
		if s.wantErr == "" && err != nil {
			t.Fatalf("step %d (%s): %v", i, s.mode, err)
		}
		if s.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), s.wantErr) || !strings.Contains(err.Error(), "only supported change is cluster-pool → multi-pool") {
				t.Fatalf("step %d (%s): got %v, want a refusal containing %q", i, s.mode, err, s.wantErr)
			}
		}
		got, err := podipamctl.RecordedMode(ctx, c, ns)
		if err != nil || got != s.after {
			t.Fatalf("step %d: recorded %q (%v), want %q", i, got, err, s.after)
		}
	}
	var ev []string
	for _, e := range events(t, c, "PodIPAMModeMismatch") {
		if e.Namespace == ns && strings.Contains(e.Note, "refusing to start") {
			ev = append(ev, e.Note)
		}
	}
	if len(ev) != 3 {
		t.Fatalf("want 3 refusal Events in %s, got %d: %q", ns, len(ev), ev)
	}
}

// refusesBeforeLeaderElection: a controller started with another mode
// exits at once with the message, although another replica holds the Lease
// (it never even waits for it). Its own namespace keeps its mode record
// apart from TestModeLock's.
func refusesBeforeLeaderElection(t *testing.T, e *testenv.Env) {
	ctx := context.Background()
	const ns = "mooring-refuse"
	if err := e.Client.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		t.Fatal(err)
	}
	if err := podipamctl.LockMode(ctx, e.Client, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatal(err)
	}
	now := metav1.NewMicroTime(time.Now())
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mooring-controller"},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("someone-else"), LeaseDurationSeconds: ptr.To(int32(3600)), AcquireTime: &now, RenewTime: &now}}
	if err := e.Client.Create(ctx, lease); err != nil {
		t.Fatal(err)
	}
	cfg := controller.Config{REST: e.Config, Log: slog.New(slog.DiscardHandler), LeaseNamespace: ns, LeaseName: "mooring-controller",
		Workers: 1, MetricsAddr: "0", HealthAddr: "0"}
	cfg.PodIPAM.Mode = podipamctl.ModeKubernetes
	runCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	err := controller.Run(runCtx, cfg)
	if err == nil || !strings.Contains(err.Error(), `pod IPAM mode is "multi-pool"`) || !strings.Contains(err.Error(), "--pod-ipam-mode=multi-pool") {
		t.Fatalf("Run: %v", err)
	}
	if runCtx.Err() != nil {
		t.Fatalf("Run waited %s instead of refusing at once", time.Since(start))
	}
	var seen bool
	for _, ev := range events(t, e.Client, "PodIPAMModeMismatch") {
		seen = seen || ev.Namespace == ns && ev.ReportingController == "mooring.dev/"+controller.EventReporter
	}
	if !seen {
		t.Fatal("the controller emitted no PodIPAMModeMismatch Event")
	}
	t.Logf("refused: %v", err)
}
