package membership

import (
	"testing"
	"time"
)

// A returning member's took message clears its Taking at its peers before
// its metadata does, for the readiness (Since) it names only: a message
// for another readiness is ignored, and a later readiness that takes
// again is Taking again. Real memberlist on loopback.
func TestTookClearsTakingForThatReadiness(t *testing.T) {
	ms := startCluster(t, 2)
	peer, back := ms[0], ms[1]
	taking := func(since int64) bool {
		for _, m := range peer.Snapshot() {
			if m.Name == back.cfg.NodeName {
				return m.MetaErr == nil && m.Meta.Taking && m.Meta.Since == since
			}
		}
		return false
	}
	publish := func(since int64) {
		t.Helper()
		if err := back.SetMeta(NodeMeta{Ready: true, Confirms: true, Since: since, Taking: true}); err != nil {
			t.Fatal(err)
		}
		waitFor(t, 5*time.Second, "the peer seeing Taking", func() bool { return taking(since) })
	}
	publish(100)

	back.Took(99) // another readiness: ignored
	time.Sleep(200 * time.Millisecond)
	if !taking(100) {
		t.Fatal("a took message naming another readiness cleared Taking")
	}

	// The metadata still says Taking (never republished): only the
	// message can clear it.
	back.Took(100)
	waitFor(t, 5*time.Second, "the took message clearing Taking", func() bool { return !taking(100) })
	if got := value(peer.met.tookReceived); got != 1 {
		t.Fatalf("mooring_members_took_received_total = %v, want 1", got)
	}

	publish(200) // a later readiness takes again: Taking until its own took
}
