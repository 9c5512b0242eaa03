package membership

import (
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// updater stands in for memberlist's UpdateNode: it either takes the
// metadata into gossip's state (telling the event delegate, as memberlist
// does for its own node) or drops it, as memberlist does when a
// concurrent refutation overtook the update's incarnation.
type updater struct {
	m     *Membership
	drops int // the first drops calls are dropped
	calls int
}

func (u *updater) UpdateNode(time.Duration) error {
	u.calls++
	if u.calls <= u.drops {
		return nil // memberlist returns nothing either: only its state tells
	}
	(*events)(u.m).NotifyUpdate(&memberlist.Node{Name: u.m.cfg.NodeName, Meta: u.m.meta.Load().([]byte)})
	return nil
}

// A dropped metadata update is published again until gossip holds it;
// one gossip took is not.
func TestPublishMetaRetriesUntilGossipHoldsIt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		drops      int
		wantCalls  int
		wantRetry  float64
		waitForAll time.Duration
	}{
		{"taken at once", 0, 1, 0, 0},
		{"dropped twice, then taken", 2, 3, 2, 10 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			m, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", Insecure: true}, nil, reg)
			if err != nil {
				t.Fatal(err)
			}
			(*events)(m).NotifyJoin(&memberlist.Node{Name: "a", Meta: m.meta.Load().([]byte)})
			if err := m.SetMeta(NodeMeta{Ready: true, Taking: true}); err != nil {
				t.Fatal(err)
			}
			u := &updater{m: m, drops: tc.drops}
			<-m.metaKick // what Run's loop reads
			m.publishMeta(u)
			deadline := time.After(tc.waitForAll)
			for u.calls < tc.wantCalls {
				select {
				case <-m.metaKick:
					m.publishMeta(u)
				case <-deadline:
					t.Fatalf("UpdateNode called %d times, want %d: a dropped update was not published again", u.calls, tc.wantCalls)
				}
			}
			m.mu.Lock()
			gossiped := string(m.gossiped)
			m.mu.Unlock()
			if want := string(m.meta.Load().([]byte)); gossiped != want {
				t.Fatalf("gossip holds %q, want %q", gossiped, want)
			}
			select {
			case <-m.metaKick:
				t.Fatal("published again although gossip holds the metadata")
			case <-time.After(3 * metaRetry):
			}
			if got := value(m.met.metaRetries); got != tc.wantRetry {
				t.Fatalf("mooring_members_meta_retries_total = %v, want %v", got, tc.wantRetry)
			}
		})
	}
}

// A change of metadata is published twice more, unchanged, after the
// pauses in repeats (a peer that missed memberlist's broadcasts gets it
// then, not at the next push/pull); a repeat of metadata that changed
// meanwhile is dropped (the change has repeats of its own).
func TestPublishMetaRepeatsAChange(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", Insecure: true}, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	m.repeats = []time.Duration{20 * time.Millisecond, 40 * time.Millisecond}
	(*events)(m).NotifyJoin(&memberlist.Node{Name: "a", Meta: m.meta.Load().([]byte)})
	u := &updater{m: m}
	if err := m.SetMeta(NodeMeta{Ready: true}); err != nil {
		t.Fatal(err)
	}
	for u.calls < 3 {
		select {
		case <-m.metaKick:
			m.publishMeta(u)
		case <-time.After(5 * time.Second):
			t.Fatalf("UpdateNode called %d times, want 3 (the change and two repeats)", u.calls)
		}
	}
	select {
	case <-m.metaKick:
		t.Fatal("published a fourth time: the repeats must stop")
	case <-time.After(200 * time.Millisecond):
	}
	if got := value(m.met.metaRepeats); got != 2 {
		t.Fatalf("mooring_members_meta_repeats_total = %v, want 2", got)
	}

	// A change overtakes the first change's repeat.
	m.repeats = []time.Duration{100 * time.Millisecond}
	if err := m.SetMeta(NodeMeta{Ready: true, Taking: true}); err != nil {
		t.Fatal(err)
	}
	<-m.metaKick
	m.publishMeta(u) // schedules its repeat
	if err := m.SetMeta(NodeMeta{Ready: false}); err != nil {
		t.Fatal(err)
	}
	<-m.metaKick // the new change, not published here: no repeat scheduled for it
	select {
	case <-m.metaKick:
		t.Fatal("the overtaken change was repeated")
	case <-time.After(300 * time.Millisecond):
	}
	if got := value(m.met.metaRepeats); got != 2 {
		t.Fatalf("mooring_members_meta_repeats_total = %v, want still 2", got)
	}
}

// Settled is false from the moment a join's state names alive members
// until every one of them has joined; dead and left ones, and this node,
// are not waited for.
func TestSettledWaitsForEveryMemberAJoinNamed(t *testing.T) {
	m, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", Insecure: true}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ev, mg := (*events)(m), (*merge)(m)
	if !m.Settled() {
		t.Fatal("not settled before any join")
	}
	ev.NotifyJoin(&memberlist.Node{Name: "a"})
	if err := mg.NotifyMerge([]*memberlist.Node{
		{Name: "a", State: memberlist.StateAlive}, {Name: "b", State: memberlist.StateAlive},
		{Name: "c", State: memberlist.StateSuspect}, {Name: "d", State: memberlist.StateDead}, {Name: "e", State: memberlist.StateLeft},
	}); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "c"} {
		if m.Settled() {
			t.Fatalf("settled before %s joined", n)
		}
		ev.NotifyJoin(&memberlist.Node{Name: n})
	}
	if !m.Settled() {
		t.Fatal("not settled after b and c joined (d is dead and e left: not waited for)")
	}
}
