package probe_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mooringlb/mooring/internal/cli"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
	"github.com/mooringlb/mooring/internal/probe"
)

// envSelf makes this test binary behave as the mooring executable inside
// the lab (kubelet stand-in, echo pods).
const envSelf = "MOORING_PROBE_TEST_SELF"

func TestMain(m *testing.M) {
	if os.Getenv(envSelf) == "1" {
		ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
		code := cli.Run(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
		stop()
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// TestProbeInLab: in the real lab (kubelet stand-in, real pod network
// namespaces and routes), fresh pods reach each other well under a second;
// with the slow-new-pods fault on node-2, the probe reports the injected
// delay and fails.
func TestProbeInLab(t *testing.T) {
	netlab.RequirePrivileges(t)
	kubebin, crds := lab.FindKubeBin(), lab.FindCRDDir("")
	_, nftErr := exec.LookPath("nft")
	if kubebin == "" || crds == "" || nftErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab prerequisites missing: kubebin %q, crds %q, nft: %v", kubebin, crds, nftErr)
		}
		t.Skipf("lab prerequisites missing: kubebin %q, crds %q, nft: %v", kubebin, crds, nftErr)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	cfg := lab.Config{
		Nodes: 2, StateDir: filepath.Join(t.TempDir(), "lab"), KubeBin: kubebin, CRDDir: crds,
		Self: self, SelfEnv: []string{envSelf + "=1"}, Mooring: false,
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 2 * time.Minute, Log: log,
	}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan *lab.Ready, 1)
	errc := make(chan error, 1)
	go func() { errc <- lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r }) }()
	defer func() {
		cancel()
		<-errc
	}()
	var r *lab.Ready
	select {
	case r = <-readyc:
	case err := <-errc:
		t.Fatalf("lab.Run returned before ready: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("lab not ready after 3 minutes")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	pcfg := probe.Config{Client: cs, Namespace: "default", Nodes: []string{"node-1", "node-2"}, Pairs: 2, Rounds: 3,
		Image: lab.EchoImage, Port: 8080, Timeout: 40 * time.Second, Interval: 50 * time.Millisecond,
		RequestTimeout: 300 * time.Millisecond, Threshold: time.Second, Requester: probe.Netns{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}

	clean, err := probe.Run(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("clean lab: %d samples, p50 %v, p99 %v, max %v", clean.Summary.Count, clean.Summary.P50, clean.Summary.P99, clean.Summary.Max)
	if !clean.Summary.Healthy() || clean.Summary.P99 >= time.Second {
		t.Fatalf("clean lab: %+v\n%+v", clean.Summary, clean.Samples)
	}

	const delay = 5 * time.Second
	if err := r.Cluster.StartFault(ctx, lab.Fault{SlowNewPods: delay, Node: "node-2"}); err != nil {
		t.Fatal(err)
	}
	pcfg.Rounds = 1
	faulty, err := probe.Run(ctx, pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("slow-new-pods=%v on node-2: p50 %v, p99 %v, max %v", delay, faulty.Summary.P50, faulty.Summary.P99, faulty.Summary.Max)
	if faulty.Summary.Healthy() || faulty.Summary.Max < delay/2 || faulty.Summary.Max > 4*delay {
		var b strings.Builder
		for _, s := range faulty.Samples {
			b.WriteString(s.Pod + " " + s.Delay.String() + " " + s.Error + "\n")
		}
		t.Fatalf("fault not reported as a ~%v delay: %+v\n%s", delay, faulty.Summary, b.String())
	}
}
