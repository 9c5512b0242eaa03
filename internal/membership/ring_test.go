package membership

import (
	"slices"
	"testing"
	"time"
)

func TestSuccessorOf(t *testing.T) {
	live := map[string]string{"node-1": "a1", "node-2": "a2", "node-3": "a3"}
	for _, c := range []struct {
		self string
		live map[string]string
		want string
	}{
		{"node-1", live, "node-2"},
		{"node-2", live, "node-3"},
		{"node-3", live, "node-1"}, // wraps
		{"node-0", live, "node-1"}, // self not (yet) in live
		{"node-9", live, "node-1"},
		{"node-2", map[string]string{"node-2": "a2"}, ""}, // alone
		{"node-2", map[string]string{}, ""},
		{"node-2", map[string]string{"node-1": "a1", "node-2": "a2"}, "node-1"},
	} {
		got, where := successorOf(c.self, c.live)
		if got != c.want || (got != "" && where != c.live[got]) {
			t.Errorf("successorOf(%q, %v) = %q, %q; want %q", c.self, c.live, got, where, c.want)
		}
	}
}

// ringWatcher runs a, whose memberlist probes once an hour (so only the
// ring can find a death within the test), and b, a's successor.
func ringWatcher(t *testing.T, ring time.Duration) (a, b *member, kernel *fakeKernel) {
	t.Helper()
	kernel = &fakeKernel{} // every node silent: a crashed b, its link gone
	a, _ = runMember(t, Config{NodeName: "a", BindAddr: "127.0.0.1", NodeCheck: kernel.check, SuspicionMult: 30,
		ProbeInterval: time.Hour, RingInterval: ring, NodeCheckInterval: 50 * time.Millisecond, AgentLossTimeout: time.Minute, Insecure: true})
	b, _ = runMember(t, Config{NodeName: "b", BindAddr: "127.0.0.1", SuspicionMult: 30, Insecure: true})
	waitFor(t, 5*time.Second, "a listening", func() bool { return a.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "a and b joined", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
	return a, b, kernel
}

// The ring watch finds a crashed successor within a ring interval, a probe
// timeout and a kernel check, whatever memberlist's own probe schedule: a
// probes b once an hour, yet drops it early within a second of the crash.
func TestRingFindsCrashedSuccessor(t *testing.T) {
	a, b, _ := ringWatcher(t, 200*time.Millisecond)
	drain(a)
	crash(b)
	start := time.Now()
	waitFor(t, 2*time.Second, "a dropped b by its ring ping", func() bool { return slices.Equal(a.Members(), []string{"a"}) })
	t.Logf("a dropped b %v after the crash", time.Since(start).Round(time.Millisecond))
	if r, e := value(a.met.ringFailed), value(a.met.early); r < 1 || e != 1 {
		t.Fatalf("ring pings failed %v, early drops %v; want >= 1 and 1", r, e)
	}
}

// Without the ring (RingInterval < 0) the same a does not find the crash
// within the same time: the test above is the ring's doing.
func TestRingOffLeavesItToMemberlist(t *testing.T) {
	a, b, kernel := ringWatcher(t, -1)
	drain(a)
	crash(b)
	time.Sleep(2 * time.Second)
	if !slices.Equal(a.Members(), []string{"a", "b"}) || value(a.met.ringFailed) != 0 || kernel.asked.Load() != 0 {
		t.Fatalf("without ring pings: members %v, ring failures %v, checks %v; want a and b, 0, 0", a.Members(), value(a.met.ringFailed), kernel.asked.Load())
	}
}

// A ring ping that fails while the successor's node answers (its agent
// stalled) moves nothing, and checks stay paced.
func TestRingStalledSuccessorKept(t *testing.T) {
	a, b, kernel := ringWatcher(t, 100*time.Millisecond)
	kernel.alive.Store(true)
	drain(a)
	crash(b) // silent agent, answering kernel: a stall as far as a can tell
	time.Sleep(1500 * time.Millisecond)
	if !slices.Equal(a.Members(), []string{"a", "b"}) || value(a.met.early) != 0 {
		t.Fatalf("members %v, early %v; want a and b, 0", a.Members(), value(a.met.early))
	}
	if r, k := value(a.met.ringFailed), kernel.asked.Load(); r < 3 || k < 1 || int(k) > int(r)+1 {
		t.Fatalf("ring failures %v, kernel checks %d; want >= 3 failures, 1..failures+1 checks", r, k)
	}
}
