// Package labtest starts the one-machine lab for other packages'
// end-to-end tests: one copy of the prerequisite checks (skip locally, fail
// under CI=true), the configuration, the wait for ready and the teardown.
// It is imported by tests only.
package labtest

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/cli"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// EnvSelf names a mooring binary the lab runs its kubelets, controller,
// agents and echo pods from (default: the test binary itself).
const EnvSelf = "MOORING_LAB_SELF"

// Main is a test binary's TestMain: with envSelf=1 in its environment the
// binary is the mooring executable the lab starts (kubelet stand-in,
// controller, agents, echo pods); otherwise it runs the tests.
func Main(m *testing.M, envSelf string) {
	if os.Getenv(envSelf) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// Options choose the lab a test gets.
type Options struct {
	Nodes    int        // 2 when 0
	Mooring  bool       // run Mooring's controller and agents
	LogLevel slog.Level // the lab's own log, to the test's output
	// MetalLB runs the real MetalLB (hack/metallb) in the lab; with
	// Mooring too, Mooring's controller only adopts (see lab.Config).
	MetalLB bool
	// BGP is lab.Config's: the router with FRR, the client behind it.
	BGP lab.BGPConfig
	// NodeMonitorGracePeriod is lab.Config's (lab.DefaultNodeMonitorGracePeriod
	// when 0).
	NodeMonitorGracePeriod time.Duration
	// PodIPAM and PodNetwork are lab.Config's: pods set up through libcni
	// with mooring-ipam (built from this tree for the test) in that mode.
	PodIPAM, PodNetwork string
}

// Start runs a lab until the test ends and returns it once ready, with a
// context that ends when the lab is torn down. The test binary must call
// Main from TestMain with the same envSelf.
func Start(t *testing.T, envSelf string, o Options) (context.Context, *lab.Ready) {
	t.Helper()
	netlab.RequirePrivileges(t)
	kubebin, crds := lab.FindKubeBin(), lab.FindCRDDir("")
	_, nftErr := exec.LookPath("nft")
	if kubebin == "" || crds == "" || nftErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab prerequisites missing: kubebin %q, crds %q, nft: %v", kubebin, crds, nftErr)
		}
		t.Skipf("lab prerequisites missing: kubebin %q, crds %q, nft: %v", kubebin, crds, nftErr)
	}
	var metallb string
	if o.MetalLB {
		if metallb = lab.FindMetalLB(); metallb == "" {
			if os.Getenv("CI") == "true" {
				t.Fatalf("MetalLB not built: run `make metallb` (or set %s)", lab.EnvMetalLB)
			}
			t.Skipf("MetalLB not built: run `make metallb` (or set %s)", lab.EnvMetalLB)
		}
	}
	if o.BGP.Enabled {
		frr.RequireFRR(t)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// EnvSelf runs the lab's processes from a built mooring binary instead
	// of this test binary (the same CLI): a benchmark then measures what an
	// operator installs, whose code pages are fewer than a test binary's.
	if v := os.Getenv(EnvSelf); v != "" {
		self = v
	}
	if o.Nodes == 0 {
		o.Nodes = 2
	}
	if o.NodeMonitorGracePeriod == 0 {
		o.NodeMonitorGracePeriod = lab.DefaultNodeMonitorGracePeriod
	}
	cfg := lab.Config{
		Nodes: o.Nodes, StateDir: filepath.Join(t.TempDir(), "lab"), KubeBin: kubebin, CRDDir: crds,
		Self: self, SelfEnv: []string{envSelf + "=1"}, Mooring: o.Mooring, MetalLB: metallb,
		NodeMonitorGracePeriod: o.NodeMonitorGracePeriod, Timeout: 2 * time.Minute, BGP: o.BGP,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: o.LogLevel})),
	}
	if o.PodIPAM != "" {
		cfg.PodIPAM, cfg.PodNetwork = o.PodIPAM, o.PodNetwork
		cfg.CNIPlugins, cfg.IPAMPlugin = cniPlugins(t), buildIPAMPlugin(t, crds)
	}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan *lab.Ready, 1)
	var runErr error
	done := make(chan struct{}) // closed once lab.Run has returned runErr
	go func() {
		runErr = lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r })
		close(done)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case r := <-readyc:
		// Registered after the lab's own cleanup, so it runs first, while
		// the logs are still there.
		t.Cleanup(func() { keepLogs(t, r) })
		return ctx, r
	case <-done:
		// The cleanup waits on done too: a lab that failed to come up
		// must not hang the test binary until its timeout.
		t.Fatalf("lab.Run returned before ready: %v", runErr)
	case <-time.After(3 * time.Minute):
		t.Fatal("lab not ready after 3 minutes")
	}
	return nil, nil
}

// cniPlugins is the hack/cniplugins build ($MOORING_CNIPLUGINS, else the
// newest cached one); missing, it skips the test, or fails it under CI.
func cniPlugins(t *testing.T) string {
	t.Helper()
	d := lab.FindCNIPlugins()
	if d == "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("no CNI plugins: run hack/cniplugins/build.sh and set %s to its last line", lab.EnvCNIPlugins)
		}
		t.Skipf("no CNI plugins: run hack/cniplugins/build.sh and set %s to its last line", lab.EnvCNIPlugins)
	}
	return d
}

// buildIPAMPlugin builds cmd/mooring-ipam of this tree (crds is its
// config/crd) into the test's temporary folder.
func buildIPAMPlugin(t *testing.T, crds string) string {
	t.Helper()
	repo := filepath.Dir(filepath.Dir(crds))
	out := filepath.Join(t.TempDir(), "mooring-ipam")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out, "./cmd/mooring-ipam")
	cmd.Dir = repo
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building mooring-ipam: %v\n%s", err, b)
	}
	return out
}

// EnvKeepLogs=1 keeps a lab's logs when the test passes too.
const EnvKeepLogs = "MOORING_LAB_KEEP_LOGS"

// keepLogs copies the lab's logs out of its state dir, which goes with the
// lab, when the test failed or EnvKeepLogs asks, and names the folder in
// the test's output (a CI failure's first question is what the agents
// logged).
func keepLogs(t *testing.T, r *lab.Ready) {
	if !t.Failed() && os.Getenv(EnvKeepLogs) != "1" {
		return
	}
	dir, err := os.MkdirTemp("", "mooring-lab-logs-")
	if err == nil {
		err = os.CopyFS(dir, os.DirFS(filepath.Join(filepath.Dir(r.Kubeconfig), "logs")))
	}
	t.Logf("the lab's logs: %s %v", dir, err)
}
