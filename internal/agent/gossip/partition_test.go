package gossip

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
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
		got, majority := quorum(tc.live, tc.held, tc.unreachable)
		if !slices.Equal(got, tc.want) || majority != tc.majority {
			t.Errorf("live %v held %v unreachable %v: %v majority=%v, want %v %v", tc.live, tc.held, tc.unreachable, got, majority, tc.want, tc.majority)
		}
	}
}

// heldMembers is a Members with held nodes (membership.Held/Release).
type heldMembers struct {
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

func announcerOf(name string, members ...string) *mooringv1.L2Announcer {
	return &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: mooringv1.L2AnnouncerStatus{Members: members}}
}

// The majority releases a held node at once when its L2Announcer starts
// to defer (members without itself) during the loss, and keeps one that
// only stalls (its L2Announcer still lists itself) or has none. Real
// loop, real clock, events as the informer delivers them.
func TestPartitionReleasesOnlyDeferringNodes(t *testing.T) {
	mem := &heldMembers{held: []string{"node-1", "node-2", "node-5"}}
	d := NewDeferrals()
	h := d.Handler(clock.RealClock{})
	h.OnAdd(announcerOf("node-1", "node-1", "node-2", "node-3"), true)
	h.OnAdd(announcerOf("node-2", "node-1", "node-2", "node-4"), true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.RunReleases(ctx, mem, clock.RealClock{}, slog.New(slog.DiscardHandler)) }()
	time.Sleep(2 * releaseEvery) // the loop has seen them held
	// node-1 starts deferring; node-2 rewrites its list, itself in it.
	h.OnUpdate(announcerOf("node-1", "node-1", "node-2", "node-3"), announcerOf("node-1", "node-2", "node-3", "node-4"))
	h.OnUpdate(announcerOf("node-2", "node-1", "node-2", "node-4"), announcerOf("node-2", "node-2", "node-4"))
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		mem.mu.Lock()
		n := len(mem.released)
		mem.mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("timed out waiting for a release")
		}
	}
	time.Sleep(3 * releaseEvery)
	cancel()
	<-done
	if want := []string{"node-1"}; !slices.Equal(mem.released, want) {
		t.Fatalf("released %v, want %v (node-2 lists itself: stalled, not deferring; node-5 has no L2Announcer)", mem.released, want)
	}
}

// Only a current deferral releases: one that began during this loss (or
// deferralGrace before it was noticed). An old list left behind by an
// agent that deferred in an earlier partition and could not rewrite its
// L2Announcer since must not release it when it later merely stalls.
func TestPartitionIgnoresStaleDeferrals(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	self := func(n string) *mooringv1.L2Announcer {
		return announcerOf(n, "node-1", "node-2", "node-3", "node-4", "node-5", "node-6", "node-7", "node-8")
	}
	deferTo := func(n string, to ...string) *mooringv1.L2Announcer { return announcerOf(n, to...) }
	type event struct {
		at       time.Duration
		old, cur *mooringv1.L2Announcer // old nil: an add
		initial  bool
	}
	for _, tc := range []struct {
		name   string
		events []event
		held   time.Duration // when the majority first sees the node held
		want   bool
	}{
		{"deferral during this loss", []event{{0, nil, self("node-1"), true}, {61 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false}}, 60 * time.Second, true},
		{"deferral a little before the hold was noticed", []event{{0, nil, self("node-1"), true}, {59 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false}}, 60 * time.Second, true},
		{"stale: deferred in an earlier partition, never rewritten", []event{{0, nil, self("node-1"), true}, {10 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false}}, 60 * time.Second, false},
		{"stale: just outside the grace", []event{{0, nil, self("node-1"), true}, {60*time.Second - deferralGrace - time.Millisecond, self("node-1"), deferTo("node-1", "node-9"), false}}, 60 * time.Second, false},
		{"stale: its member list changed while it kept deferring", []event{{0, nil, self("node-1"), true}, {10 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false},
			{61 * time.Second, deferTo("node-1", "node-9"), deferTo("node-1", "node-8", "node-9"), false}}, 60 * time.Second, false},
		{"deferring already when this agent started watching", []event{{0, nil, deferTo("node-1", "node-9"), true}}, 60 * time.Second, false},
		{"a new deferral after it came back", []event{{0, nil, self("node-1"), true}, {10 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false},
			{20 * time.Second, deferTo("node-1", "node-9"), self("node-1"), false}, {61 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false}}, 60 * time.Second, true},
		{"came back: lists itself again", []event{{0, nil, self("node-1"), true}, {61 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false},
			{62 * time.Second, deferTo("node-1", "node-9"), self("node-1"), false}}, 60 * time.Second, false},
		{"created deferring after the watch began", []event{{61 * time.Second, nil, deferTo("node-1", "node-9"), false}}, 60 * time.Second, true},
		{"deleted", []event{{0, nil, self("node-1"), true}, {61 * time.Second, self("node-1"), deferTo("node-1", "node-9"), false}, {62 * time.Second, nil, nil, false}}, 60 * time.Second, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := NewDeferrals()
			for _, e := range tc.events {
				if e.cur == nil {
					a.forget("node-1")
					continue
				}
				a.observe(e.old, e.cur, at(e.at), e.initial)
			}
			mem := &heldMembers{held: []string{"node-1"}}
			// Held since tc.held; the round comes later and judges against
			// the hold's start, not its own time.
			since := map[string]time.Time{"node-1": at(tc.held), "node-7": at(0)}
			got := a.releaseRound(mem, since, at(tc.held+3*time.Second))
			if _, ok := since["node-7"]; ok {
				t.Error("a node no longer held keeps its hold time")
			}
			if released := slices.Equal(got, []string{"node-1"}); released != tc.want {
				t.Errorf("released %v, want release %v", got, tc.want)
			}
		})
	}
}
