package controller

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/promtest"
	"github.com/mooringlb/mooring/internal/testenv"
)

func TestMain(m *testing.M) {
	// klog and controller-runtime log through process globals; set them
	// once before any client runs, as the binary does.
	kube.BridgeLogs(slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	os.Exit(m.Run())
}

// startEnv starts the shared test control plane (dual-stack) with the
// controller's lease namespace.
func startEnv(t testing.TB) *testenv.Env {
	t.Helper()
	e := testenv.StartT(t)
	e.Config.QPS, e.Config.Burst = 1000, 2000
	mkNamespace(t, e.Client, DefaultLeaseNamespace, nil)
	return e
}

// running is a controller started by startController.
type running struct {
	reg  *prometheus.Registry
	logs *lockedBuffer // warnings and errors the controller logged
	stop func()        // cancels and waits for Run to return
}

// startController runs the controller against rc until stop or test end.
func startController(t testing.TB, rc *rest.Config, mutate ...func(*Config)) *running {
	t.Helper()
	rc = rest.CopyConfig(rc)
	rc.QPS, rc.Burst = 1000, 2000
	reg := prometheus.NewRegistry()
	logs := &lockedBuffer{}
	cfg := Config{
		REST:               rc,
		Log:                testLogger(t, logs),
		DefaultClass:       true,
		LeaseNamespace:     DefaultLeaseNamespace,
		LeaseName:          DefaultLeaseName,
		Workers:            DefaultWorkers,
		PoolStatusInterval: 200 * time.Millisecond,
		MetricsAddr:        "0",
		HealthAddr:         "0",
		Registerer:         reg,
	}
	for _, m := range mutate {
		m(&cfg)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Run(ctx, cfg) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("controller Run: %v", err)
				}
			case <-time.After(30 * time.Second):
				t.Errorf("controller did not stop within 30s")
			}
		})
	}
	t.Cleanup(stop)
	return &running{reg: reg, logs: logs, stop: stop}
}

func testLogger(t testing.TB, logs io.Writer) *slog.Logger {
	level := slog.LevelWarn
	if os.Getenv("MOORING_TEST_LOG") != "" {
		level = slog.LevelDebug
	}
	w := io.MultiWriter(os.Stderr, logs)
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: level})).With("test", t.Name())
}

// lockedBuffer collects log output written from many goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func mkNamespace(t testing.TB, c client.Client, name string, labels map[string]string) {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if err := c.Create(context.Background(), ns); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// nsPool returns a pool selecting the namespaces labelled t=<scope>.
func nsPool(name, scope string, blocks ...string) *mooringv1.LoadBalancerIPPool {
	p := &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: name}}
	for _, b := range blocks {
		if lo, hi, ok := strings.Cut(b, "-"); ok {
			p.Spec.Blocks = append(p.Spec.Blocks, mooringv1.IPBlock{Start: lo, Stop: hi})
		} else {
			p.Spec.Blocks = append(p.Spec.Blocks, mooringv1.IPBlock{CIDR: b})
		}
	}
	if scope != "" {
		p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"t": scope}}
	}
	return p
}

func create(t testing.TB, c client.Client, obj client.Object) {
	t.Helper()
	if err := c.Create(context.Background(), obj); err != nil {
		t.Fatalf("create %T %s: %v", obj, obj.GetName(), err)
	}
}

// lbService returns a LoadBalancer Service exposing TCP port 80.
func lbService(ns, name string, mutate ...func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{}},
		Spec: corev1.ServiceSpec{
			Type:                          corev1.ServiceTypeLoadBalancer,
			AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports:                         []corev1.ServicePort{{Name: "p", Protocol: corev1.ProtocolTCP, Port: 80}},
		},
	}
	for _, m := range mutate {
		m(s)
	}
	return s
}

func withAnn(k, v string) func(*corev1.Service) {
	return func(s *corev1.Service) { s.Annotations[k] = v }
}

func withPorts(ports ...int32) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.Ports = nil
		for _, p := range ports {
			s.Spec.Ports = append(s.Spec.Ports, corev1.ServicePort{Name: fmt.Sprintf("p%d", p), Protocol: corev1.ProtocolTCP, Port: p})
		}
	}
}

func withFamilies(policy corev1.IPFamilyPolicy, fams ...corev1.IPFamily) func(*corev1.Service) {
	return func(s *corev1.Service) {
		s.Spec.IPFamilyPolicy = &policy
		s.Spec.IPFamilies = fams
	}
}

func getSvc(t testing.TB, c client.Client, ns, name string) *corev1.Service {
	t.Helper()
	var s corev1.Service
	if err := c.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &s); err != nil {
		t.Fatal(err)
	}
	return &s
}

func ingressIPs(s *corev1.Service) []string {
	var out []string
	for _, i := range s.Status.LoadBalancer.Ingress {
		out = append(out, i.IP)
	}
	return out
}

// eventually polls cond until it returns "" or the timeout passes.
func eventually(t testing.TB, timeout time.Duration, cond func() string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		msg := cond()
		if msg == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, msg)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitIPs waits until the Service lists exactly want (any order).
func waitIPs(t testing.TB, c client.Client, ns, name string, want ...string) {
	t.Helper()
	eventually(t, 20*time.Second, func() string {
		got := ingressIPs(getSvc(t, c, ns, name))
		if slices.Equal(sorted(got), sorted(want)) {
			return ""
		}
		return fmt.Sprintf("%s/%s ingress %v, want %v", ns, name, got, want)
	})
}

func sorted(xs []string) []string { xs = slices.Clone(xs); slices.Sort(xs); return xs }

// waitCondition waits until the Service's condition typ has reason and
// returns its message.
func waitCondition(t testing.TB, c client.Client, ns, name, typ, reason string) string {
	t.Helper()
	var msg string
	eventually(t, 20*time.Second, func() string {
		cond := meta.FindStatusCondition(getSvc(t, c, ns, name).Status.Conditions, typ)
		if cond != nil && cond.Reason == reason {
			msg = cond.Message
			return ""
		}
		return fmt.Sprintf("%s/%s condition %s = %+v, want reason %s", ns, name, typ, cond, reason)
	})
	return msg
}

// waitEvent waits for an events.k8s.io Event about the Service with reason
// and returns it.
func waitEvent(t testing.TB, cs kubernetes.Interface, ns, name, reason string) eventsv1.Event {
	t.Helper()
	var found eventsv1.Event
	eventually(t, 20*time.Second, func() string {
		list, err := cs.EventsV1().Events(ns).List(context.Background(), metav1.ListOptions{})
		if err != nil {
			return err.Error()
		}
		var seen []string
		for _, e := range list.Items {
			if e.Regarding.Name == name {
				if e.Reason == reason {
					found = e
					return ""
				}
				seen = append(seen, e.Reason)
			}
		}
		return fmt.Sprintf("no event %s for %s/%s (seen %v)", reason, ns, name, seen)
	})
	return found
}

// pending asserts a pending reason shows in the condition AND an Event.
func pending(t testing.TB, env *testenv.Env, ns, name string, reason string) string {
	t.Helper()
	msg := waitCondition(t, env.Client, ns, name, mooringv1.ConditionAddressAssigned, reason)
	ev := waitEvent(t, env.Clientset, ns, name, reason)
	if ev.Type != corev1.EventTypeWarning || ev.Note == "" {
		t.Errorf("%s/%s event %s: type %s note %q, want a Warning with a note", ns, name, reason, ev.Type, ev.Note)
	}
	if len(ingressIPs(getSvc(t, env.Client, ns, name))) != 0 {
		t.Errorf("%s/%s pending with %s but has ingress %v", ns, name, reason, ingressIPs(getSvc(t, env.Client, ns, name)))
	}
	return msg
}

// gauge reads one series from a registry (labels as name=value pairs), 0
// when it is absent.
func gauge(t testing.TB, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	v, _ := promtest.Value(reg, name, labels...)
	return v
}

// apiWrites reads the API server's mutating requests
// (testenv.MutatingRequests) summed over verbs by "resource/subresource",
// the key ownResources uses.
func apiWrites(t testing.TB, cfg *rest.Config) map[string]float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	w, err := testenv.MutatingRequests(context.Background(), cs)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for k, v := range w {
		_, res, _ := strings.Cut(k, " ")
		out[res] += v
	}
	return out
}

// apiServerCPU reads the API server's own CPU seconds from its /metrics.
func apiServerCPU(t testing.TB, cfg *rest.Config) float64 {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "process_cpu_seconds_total "); ok {
			cpu, _ := strconv.ParseFloat(v, 64)
			return cpu
		}
	}
	t.Fatal("the API server's /metrics has no process_cpu_seconds_total")
	return 0
}

// diff is after − before, without the zero entries.
func diff(after, before map[string]float64) map[string]float64 {
	return testenv.DiffRequests(before, after)
}
