package probe

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"

	"github.com/mooringlb/mooring/internal/testenv"
)

// fakeKubelet plays the kubelet for the probe's pods against the real
// apiserver: each pod gets its own loopback address with a real HTTP
// server, runs "in" this test process's network namespace (its container
// ID names this PID, as the lab's do) and is marked Ready. Pods on
// slowNode answer only `delay` after they turn Ready: the seed-004 fault.
type fakeKubelet struct {
	cs       kubernetes.Interface
	slowNode string
	delay    time.Duration
	mu       sync.Mutex
	next     int
	servers  []*http.Server
}

func (k *fakeKubelet) run(ctx context.Context, t *testing.T, ns string) {
	w, err := k.cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Error(err)
		return
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		p, ok := ev.Object.(*corev1.Pod)
		if !ok || ev.Type != watch.Added {
			continue
		}
		// A pod deleted before its status is written (the cancelled run's
		// cleanup races the kubelet, as it does a real one) is not an error.
		if err := k.start(ctx, p); err != nil && ctx.Err() == nil && !apierrors.IsNotFound(err) {
			t.Errorf("fake kubelet: %v", err)
		}
	}
}

func (k *fakeKubelet) start(ctx context.Context, p *corev1.Pod) error {
	k.mu.Lock()
	k.next++
	ip := fmt.Sprintf("127.0.%d.%d", 10+k.next/200, 2+k.next%200)
	k.mu.Unlock()
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(int(p.Spec.Containers[0].Ports[0].ContainerPort))))
	if err != nil {
		return err
	}
	var reachableAt time.Time
	var rmu sync.Mutex
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rmu.Lock()
		at := reachableAt
		rmu.Unlock()
		if at.IsZero() || time.Now().Before(at) {
			// Unreachable: hold the request past the prober's timeout.
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
			return
		}
		io.WriteString(w, "ok")
	}), ReadHeaderTimeout: time.Second}
	go srv.Serve(ln)
	k.mu.Lock()
	k.servers = append(k.servers, srv)
	k.mu.Unlock()
	status := corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}},
		Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "echo", Ready: true, ContainerID: LabContainerPrefix + strconv.Itoa(os.Getpid())}}}
	rmu.Lock()
	reachableAt = time.Now()
	if p.Spec.NodeName == k.slowNode {
		reachableAt = reachableAt.Add(k.delay)
	}
	rmu.Unlock()
	// The pod may have changed since its Added event (a conflict seen in
	// CI): write the status onto the current object.
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := k.cs.CoreV1().Pods(p.Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status = status
		_, err = k.cs.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func (k *fakeKubelet) stop() {
	k.mu.Lock()
	defer k.mu.Unlock()
	for _, s := range k.servers {
		s.Close()
	}
}

func probeConfig(cs kubernetes.Interface, ns string) Config {
	return Config{Client: cs, Namespace: ns, Nodes: []string{"node-a", "node-b"}, Pairs: 2, Rounds: 2,
		Image: "unused", Port: 8080, Timeout: 20 * time.Second, Interval: 50 * time.Millisecond,
		RequestTimeout: 300 * time.Millisecond, Threshold: time.Second, Requester: Netns{},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

func remaining(t *testing.T, cs kubernetes.Interface, ns string) int {
	t.Helper()
	l, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelRun})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range l.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// Against a real apiserver, with requests made from inside the pods'
// network namespace: a healthy data plane passes; one node whose new pods
// are unreachable for 2 s after Ready is caught with its delay; the pods
// are gone afterwards, also when the run is cancelled half-way.
func TestNewPodProbe(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("entering network namespaces needs root")
		}
		t.Skip("entering network namespaces needs root")
	}
	env := testenv.StartT(t)
	cs := env.Clientset
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "default"
	k := &fakeKubelet{cs: cs, slowNode: "node-b", delay: 2 * time.Second}
	defer k.stop()
	go k.run(ctx, t, ns)

	// Healthy: no slow node.
	k.mu.Lock()
	k.slowNode = ""
	k.mu.Unlock()
	rep, err := Run(ctx, probeConfig(cs, ns))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Count != 8 || !rep.Summary.Healthy() {
		t.Fatalf("healthy run: %+v\n%+v", rep.Summary, rep.Samples)
	}
	if n := remaining(t, cs, ns); n != 0 {
		t.Fatalf("%d probe pods left after the run", n)
	}

	// The fault: node-b's new pods are unreachable for 2 s after Ready.
	k.mu.Lock()
	k.slowNode = "node-b"
	k.mu.Unlock()
	rep, err = Run(ctx, probeConfig(cs, ns))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Summary.Healthy() || rep.Summary.Max < 2*time.Second || rep.Summary.Max > 10*time.Second {
		t.Fatalf("fault not caught: %+v", rep.Summary)
	}
	for _, s := range rep.Samples {
		// Requests TO a node-b pod wait ~2 s. (Here the fault holds only
		// the server side; a real one drops both directions.)
		if strings.HasSuffix(s.Partner, "-b") && s.Delay < 1500*time.Millisecond {
			t.Errorf("sample %+v: its partner is on node-b, so it must wait ~2 s", s)
		}
	}

	// Ctrl-C half-way: the pods are still deleted.
	cctx, ccancel := context.WithCancel(ctx)
	go func() {
		for remaining(t, cs, ns) == 0 {
			time.Sleep(20 * time.Millisecond)
		}
		ccancel()
	}()
	if _, err := Run(cctx, probeConfig(cs, ns)); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("cancelled run: err %v", err)
	}
	if n := remaining(t, cs, ns); n != 0 {
		t.Fatalf("%d probe pods left after a cancelled run", n)
	}
}
