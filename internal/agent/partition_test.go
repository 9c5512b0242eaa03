package agent

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
)

func TestQuorumMembers(t *testing.T) {
	for _, tc := range []struct {
		live, held, unreachable, want []string
		majority                      bool
	}{
		{[]string{"n1", "n2", "n3"}, nil, nil, []string{"n1", "n2", "n3"}, true},
		{[]string{"n2", "n3"}, nil, []string{"n1"}, []string{"n2", "n3"}, true},        // the majority side
		{[]string{"n1"}, nil, []string{"n2", "n3"}, []string{"n2", "n3"}, false},       // the minority defers
		{[]string{"n1"}, nil, []string{"n2"}, []string{"n1"}, true},                    // a tie: the smallest name
		{[]string{"n2"}, nil, []string{"n1"}, []string{"n1"}, false},                   // ... and its other half
		{[]string{"n3", "n4"}, nil, []string{"n1", "n2"}, []string{"n1", "n2"}, false}, // 2 against 2
		{[]string{"n1"}, nil, nil, []string{"n1"}, true},                               // a lone survivor of real deaths
		// Held nodes (gossip lost, kernel answers) stay members of the
		// majority until released or unreachable...
		{[]string{"n1", "n2", "n3"}, []string{"n1"}, nil, []string{"n1", "n2", "n3"}, true},
		// ... while a strict minority counting them defers at once,
		{[]string{"n1", "n2", "n3"}, []string{"n2", "n3"}, nil, []string{"n2", "n3"}, false},
		{[]string{"n1", "n3"}, []string{"n3"}, []string{"n2"}, []string{"n2", "n3"}, false},
		// but a tie with held nodes waits (in two nodes, a stalled peer
		// must not make the other defer).
		{[]string{"n1", "n2"}, []string{"n1"}, nil, []string{"n1", "n2"}, true},
		{[]string{"n1", "n2"}, []string{"n2"}, nil, []string{"n1", "n2"}, true},
	} {
		got, majority := quorumMembers(tc.live, tc.held, tc.unreachable)
		if !slices.Equal(got, tc.want) || majority != tc.majority {
			t.Errorf("live %v held %v unreachable %v: %v majority=%v, want %v %v", tc.live, tc.held, tc.unreachable, got, majority, tc.want, tc.majority)
		}
	}
}

// heldMembers is a Members with held nodes (membership.Held/Release).
type heldMembers struct {
	fakeMembers
	mu       sync.Mutex
	held     []string
	released []string
}

func (h *heldMembers) Held() []string  { h.mu.Lock(); defer h.mu.Unlock(); return slices.Clone(h.held) }
func (h *heldMembers) Deferring() bool { return false }
func (h *heldMembers) Release(n string) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !slices.Contains(h.held, n) {
		return false
	}
	h.held = slices.DeleteFunc(h.held, func(x string) bool { return x == n })
	h.released = append(h.released, n)
	return true
}

// The majority releases a held node at once when its L2Announcer says it
// defers (members without itself), and keeps one that only stalls (its
// L2Announcer still lists itself) or has none.
func TestReleaseLoopReleasesOnlyDeferringNodes(t *testing.T) {
	announcer := func(name string, members ...string) *mooringv1.L2Announcer {
		return &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: mooringv1.L2AnnouncerStatus{Members: members}}
	}
	c := fake.NewClientBuilder().WithScheme(kube.Scheme()).WithStatusSubresource(&mooringv1.L2Announcer{}).
		WithObjects(announcer("node-1", "node-2", "node-3"), announcer("node-2", "node-1", "node-2", "node-4")).Build()
	mem := &heldMembers{fakeMembers: fakeMembers{changes: make(chan struct{}, 1)}, held: []string{"node-1", "node-2", "node-5"}}
	cfg := DefaultConfig()
	cfg.NodeName = "node-4"
	a := New(cfg, Deps{Reader: c, Client: c, Members: mem, Registerer: prometheus.NewRegistry()})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.releaseLoop(ctx) }()
	waitUntil(t, func() bool { mem.mu.Lock(); defer mem.mu.Unlock(); return len(mem.released) > 0 }, "a release")
	time.Sleep(3 * releaseEvery)
	cancel()
	<-done
	if want := []string{"node-1"}; !slices.Equal(mem.released, want) {
		t.Fatalf("released %v, want %v (node-2 lists itself: stalled, not deferring; node-5 has no L2Announcer)", mem.released, want)
	}
}
