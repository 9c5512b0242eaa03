package probe_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/probe"
)

// envSelf makes this test binary behave as the mooring executable inside
// the lab (kubelet stand-in, echo pods).
const envSelf = "MOORING_PROBE_TEST_SELF"

func TestMain(m *testing.M) { labtest.Main(m, envSelf) }

// TestProbeInLab: in the real lab (kubelet stand-in, real pod network
// namespaces and routes), fresh pods reach each other well under a second;
// with the slow-new-pods fault on node-2, the probe reports the injected
// delay and fails.
func TestProbeInLab(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{LogLevel: slog.LevelInfo})
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
	if _, err := r.Cluster.StartFault(ctx, lab.Fault{Kind: lab.FaultSlowNewPods, SlowNewPods: delay, Node: "node-2"}); err != nil {
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
