package lab_test

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
)

// EnvBenchDefaultInstall turns on TestBenchDefaultInstallFailover and says
// how many failovers to measure per install (off by default: each run
// costs about 30 s).
const EnvBenchDefaultInstall = "MOORING_LAB_BENCH_DEFAULT_INSTALL"

// A default `helm install` (the chart's defaults plus the gossip key, as
// `lab up --install=chart` renders it) fails over as the lab does: phase 2
// ends about a second after a hard node kill, because fast endpoint
// eviction is a default. Measured with the failover tool's own series
// against both installs, one after the other; the chart's errors-until
// median must be at most 3 s.
//
//	MOORING_LAB_BENCH_DEFAULT_INSTALL=3 go test -count=1 -timeout 30m \
//	    -run TestBenchDefaultInstallFailover -v ./internal/lab
func TestBenchDefaultInstallFailover(t *testing.T) {
	runs, _ := strconv.Atoi(os.Getenv(EnvBenchDefaultInstall))
	if runs < 1 {
		t.Skipf("a benchmark: set %s=N (failovers per install)", EnvBenchDefaultInstall)
	}
	for _, install := range []string{lab.InstallChart, ""} {
		name := "chart defaults"
		if install == "" {
			name = "lab processes"
		}
		t.Run(name, func(t *testing.T) {
			s := benchInstallFailover(t, install, runs)
			t.Logf("%s, %d runs: phase 1 median %v worst %v; errors until median %v worst %v; endpoints out with phase 2 median %v; failed requests per run median %d worst %d; incomplete %d",
				name, s.Runs, s.Phase1.Median.Round(time.Millisecond), s.Phase1.Worst.Round(time.Millisecond),
				s.ErrorsUntil.Median.Round(time.Millisecond), s.ErrorsUntil.Worst.Round(time.Millisecond),
				s.Phase2.Median.Round(time.Millisecond), s.Failed.Median, s.Failed.Worst, s.Incomplete)
			if s.Incomplete > 0 {
				t.Errorf("%d of %d runs did not complete both phases", s.Incomplete, s.Runs)
			}
			if install == lab.InstallChart && s.ErrorsUntil.Median > 3*time.Second {
				t.Errorf("a default install: errors until median %v, want at most 3 s (fast endpoint eviction)", s.ErrorsUntil.Median)
			}
		})
	}
}

// benchInstallFailover brings a lab up with install and measures runs hard
// failovers of the demo Service, restoring the node between runs.
func benchInstallFailover(t *testing.T, install string, runs int) failover.Summary {
	kubebin, crds := requireLab(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cfg := lab.Config{
		Nodes: 3, StateDir: filepath.Join(t.TempDir(), "lab"), KubeBin: kubebin, CRDDir: crds,
		Self: self, SelfEnv: []string{envSelf + "=1"}, Mooring: true, Install: install,
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 2 * time.Minute,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if install == lab.InstallChart {
		if cfg.Helm, cfg.ChartDir = lab.FindHelm(), lab.FindChartDir(""); cfg.Helm == "" || cfg.ChartDir == "" {
			t.Fatalf("--install=chart needs helm (`make helm`, or set %s) and charts/mooring", lab.EnvHelm)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyc := make(chan *lab.Ready, 1)
	errc := make(chan error, 1)
	go func() { errc <- lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r }) }()
	var r *lab.Ready
	select {
	case r = <-readyc:
	case err := <-errc:
		t.Fatalf("lab.Run returned before ready: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("lab not ready after 3 minutes")
	}
	defer func() { cancel(); <-errc }()
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(rc)
	client := r.Cluster.Host("client")
	nl, err := client.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	fc := failover.DefaultConfig(failover.Target{Addr: netip.AddrPortFrom(netip.MustParseAddr(r.Service.Ingress[0]), lab.DemoPort)})
	fc.Runs, fc.MaxRun = runs, 90*time.Second
	env := failover.Env{
		Dial:     failover.NamespaceDialer(client.NS()),
		Killer:   failover.KillerFunc(func(_ context.Context, node string) error { return r.Cluster.Kill(node) }),
		Restorer: failover.RestorerFunc(func(_ context.Context, node string) error { return r.Cluster.Restore(node) }),
		Owner:    failover.NeighbourTable{Handle: nl},
		NodeMACs: labNodeMACs(r),
		Cluster:  failover.KubeCluster{Client: cs, Namespace: lab.DemoNamespace, Name: lab.DemoService},
		Log:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Progress: func(e failover.ProgressEvent) { t.Logf("failover %+.2fs: %s", e.SinceKill.Seconds(), e.Text) },
	}
	mctx, mcancel := context.WithTimeout(ctx, time.Duration(runs)*4*time.Minute)
	defer mcancel()
	res, err := failover.Measure(mctx, fc, env)
	if err != nil || len(res) != runs {
		t.Fatalf("failover.Measure: %d of %d runs, %v", len(res), runs, err)
	}
	var tls []failover.Timeline
	for _, run := range res {
		logTimeline(t, run)
		tls = append(tls, run.Timeline)
	}
	return failover.SummarizeRuns(tls)
}
