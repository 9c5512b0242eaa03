package evict

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/testenv"
)

// guardMembers is a member set the test steers (the evictor's view of
// gossip); everything else is real: the API server, the patches, Events.
type guardMembers struct {
	mu                sync.Mutex
	live, unreachable []string
	deferring         bool
}

func (m *guardMembers) set(live []string, deferring bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.live, m.deferring = live, deferring
}
func (m *guardMembers) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.live)
}
func (m *guardMembers) Unreachable() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.unreachable)
}
func (m *guardMembers) Deferring() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.deferring
}

// The guards of fast eviction against a real API server: a deferring
// (minority) side and a non-deciding agent write nothing; the decider
// marks at most --fast-eviction-max-share of the Nodes (2 of 6 at 0.34) and
// records a Limited Event for the rest; a node whose kernel answers is
// never marked.
func TestEvictionGuards(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs := env.Clientset
	var names []string
	for i := 1; i <= 6; i++ {
		name := fmt.Sprintf("node-%d", i)
		names = append(names, name)
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.213.0.%d", 10+i)}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		guardPod(ctx, t, cs, "web-"+name, name, fmt.Sprintf("10.244.%d.7", i))
		// Each agent's L2Announcer, as its status writer creates it.
		if err := env.Client.Create(ctx, &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: name}}); err != nil {
			t.Fatal(err)
		}
	}
	// node-4 also runs a pod of a second block (outside any podCIDRs) and a
	// hostNetwork pod (its node's address); a LoadBalancer Service exists.
	guardPod(ctx, t, cs, "multipool-node-4", "node-4", "10.250.0.9")
	guardPod(ctx, t, cs, "hostnet-node-4", "node-4", "10.213.0.14")
	lb, err := cs.CoreV1().Services("default").Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "lb"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	lb.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.213.0.100"}}
	if _, err := cs.CoreV1().Services("default").UpdateStatus(ctx, lb, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	alive := netip.MustParseAddr("10.213.0.13") // node-3's kernel answers
	check := func(_ context.Context, a netip.Addr) (bool, error) { return a == alive, nil }
	var ctMu sync.Mutex
	cleaned := map[string][]conntrack.Match{} // by the agent's node
	evictor := func(self string, m *guardMembers) *Evictor {
		ct := func(m conntrack.Match) (int, error) {
			ctMu.Lock()
			defer ctMu.Unlock()
			cleaned[self] = append(cleaned[self], m)
			return 0, nil
		}
		log := slog.New(slog.DiscardHandler)
		rec := &status.Recorder{C: env.Client, Clock: clock.RealClock{}, Node: self, Log: log, Writes: status.NewWrites(nil)}
		return New(Config{Node: self, MaxShare: 0.34}, Deps{View: m, Reader: env.Client, Client: env.Client, NodeCheck: check, Conntrack: ct,
			Recorder: rec, Clock: clock.RealClock{}, Log: log}, nil)
	}
	ready := func(node string) corev1.ConditionStatus {
		p, err := cs.CoreV1().Pods("default").Get(ctx, "web-"+node, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady {
				return c.Status
			}
		}
		return ""
	}
	// node-3 (alive: its agent stalled), node-4, node-5 and node-6 leave
	// gossip; node-1 and node-2 remain.
	after := []string{"node-1", "node-2"}
	for _, tc := range []struct {
		what, self string
		deferring  bool
	}{
		{"a deferring side", "node-1", true},
		{"an agent that is not the decider", "node-2", false},
	} {
		m := &guardMembers{live: names}
		e := evictor(tc.self, m)
		e.round(ctx)
		m.set(after, tc.deferring)
		e.round(ctx)
		for _, n := range names {
			if ready(n) != corev1.ConditionTrue {
				t.Fatalf("%s marked %s's pod NotReady", tc.what, n)
			}
		}
		if w := lostWrites(e); w != 0 {
			t.Errorf("%s wrote its status.lost %v times, want 0", tc.what, w)
		}
	}
	// A deferring side cleans no conntrack either; every majority agent
	// cleans on its own node, the non-deciding one included.
	if got := cleaned["node-1"]; len(got) != 0 {
		t.Errorf("the deferring side cleaned conntrack: %v", got)
	}
	if len(cleaned["node-2"]) == 0 {
		t.Fatal("a majority agent that does not decide cleaned no conntrack")
	}
	var via4 []netip.Prefix // what node-2 matched for node-4, the confirmed-dead nodes' entries together
	for _, m := range cleaned["node-2"] {
		if !slices.Equal(m.To, []netip.Addr{netip.MustParseAddr("10.213.0.100")}) || !m.Unreplied {
			t.Errorf("conntrack match %+v: want To the LoadBalancer address, Unreplied", m)
		}
		if m.Matcher().Selects(netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("10.250.0.9"), false) {
			via4 = m.Via
		}
	}
	for _, ep := range []string{"10.244.4.7", "10.250.0.9", "10.213.0.14"} {
		if !conntrack.NewPrefixSet(via4).Contains(netip.MustParseAddr(ep)) {
			t.Errorf("node-4's endpoint %s is not matched: %v", ep, via4)
		}
	}
	if conntrack.NewPrefixSet(via4).Contains(netip.MustParseAddr("10.244.3.7")) {
		t.Errorf("node-3's (alive) endpoint matched: %v", via4)
	}
	m := &guardMembers{live: names}
	e := evictor("node-1", m)
	e.round(ctx)
	m.set(after, false)
	e.round(ctx)
	got := map[string]corev1.ConditionStatus{}
	for _, n := range names {
		got[n] = ready(n)
	}
	want := map[string]corev1.ConditionStatus{"node-1": "True", "node-2": "True", "node-3": "True", "node-4": "False", "node-5": "False", "node-6": "True"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Ready by node %v, want %v (node-3 alive, at most 2 of 6 nodes)", got, want)
	}
	evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string][]string{}
	for _, ev := range evs.Items {
		reasons[ev.InvolvedObject.Name] = append(reasons[ev.InvolvedObject.Name], ev.Reason)
	}
	if fmt.Sprint(reasons) != "map[node-4:[MooringPodsMarkedNotReady] node-5:[MooringPodsMarkedNotReady] node-6:[MooringEvictionLimited]]" {
		t.Errorf("events %v", reasons)
	}
	// Before it marked them, the decider listed node-4 and node-5 in its
	// L2Announcer's status.lost (the admission policy allows only that):
	// one write each; not node-6, held back.
	lostIs(ctx, t, env.Client, "node-1", []string{"node-4", "node-5"})
	if w := lostWrites(e); w != 2 {
		t.Errorf("status.lost writes after two evictions: %v, want 2", w)
	}
	// A later round repeats nothing; node-4 back in gossip frees a slot:
	// one write lists node-6 and drops node-4.
	e.round(ctx)
	if w := lostWrites(e); w != 2 {
		t.Errorf("status.lost writes after a round with no change: %v, want 2", w)
	}
	m.set([]string{"node-1", "node-2", "node-4"}, false)
	e.round(ctx)
	if ready("node-6") != corev1.ConditionFalse {
		t.Error("node-6 still not marked after node-4 came back")
	}
	lostIs(ctx, t, env.Client, "node-1", []string{"node-5", "node-6"})
	if w := lostWrites(e); w != 3 {
		t.Errorf("status.lost writes after node-4 came back and node-6 was marked: %v, want 3", w)
	}
	// node-5 back, node-6's Node deleted: one write clears both; steady
	// rounds write nothing.
	if err := cs.CoreV1().Nodes().Delete(ctx, "node-6", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	m.set([]string{"node-1", "node-2", "node-4", "node-5"}, false)
	for range 3 {
		e.round(ctx)
	}
	lostIs(ctx, t, env.Client, "node-1", nil)
	if w, f := lostWrites(e), counterValue(e.deps.Recorder.Writes.Counter("announcer_lost", "error")); w != 4 || f != 0 {
		t.Errorf("status.lost writes after the lost nodes came back or went: %v (%v failed), want 4 (0)", w, f)
	}
}

// lostWrites is how many writes of status.lost an evictor made.
func lostWrites(e *Evictor) float64 {
	return counterValue(e.deps.Recorder.Writes.Counter("announcer_lost", "ok"))
}

// lostIs checks node's L2Announcer status.lost.
func lostIs(ctx context.Context, t *testing.T, c client.Client, node string, want []string) {
	t.Helper()
	var an mooringv1.L2Announcer
	if err := c.Get(ctx, client.ObjectKey{Name: node}, &an); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(an.Status.Lost, want) {
		t.Errorf("%s's status.lost = %v, want %v", node, an.Status.Lost, want)
	}
}

func guardPod(ctx context.Context, t *testing.T, cs kubernetes.Interface, name, node, ip string) {
	t.Helper()
	p, err := cs.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "web", Image: "web"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, Conditions: []corev1.PodCondition{
		{Type: corev1.PodReady, Status: corev1.ConditionTrue}, {Type: corev1.ContainersReady, Status: corev1.ConditionTrue}}}
	if _, err := cs.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
