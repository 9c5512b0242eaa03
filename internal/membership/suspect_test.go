package membership

import (
	"slices"
	"testing"
	"time"
)

func TestSuspectOf(t *testing.T) {
	for line, want := range map[string]string{
		"Suspect node-2 has failed, no acks received":    "node-2",
		"Suspect  has failed, no acks received":          "",
		"Marking node-2 as failed, suspect timeout":      "",
		"Suspect node-2 has failed, no acks received ok": "",
	} {
		if got, ok := suspectOf(line); got != want || ok != (want != "") {
			t.Errorf("suspectOf(%q) = %q, %v; want %q", line, got, ok, want)
		}
	}
}

// suspectPair is checkedPair with a suspicion timeout of about 6 s
// (SuspicionMult 30 × 200 ms with two members), far longer than a probe
// and a kernel check.
func suspectPair(t *testing.T, kernel *fakeKernel) (a, b *member) {
	t.Helper()
	a, _ = runMember(t, Config{NodeName: "a", BindAddr: "127.0.0.1", NodeCheck: kernel.check, SuspicionMult: 30,
		NodeCheckInterval: 50 * time.Millisecond, AgentLossTimeout: time.Minute, Insecure: true})
	b, _ = runMember(t, Config{NodeName: "b", BindAddr: "127.0.0.1", SuspicionMult: 30, Insecure: true})
	waitFor(t, 5*time.Second, "a listening", func() bool { return a.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	waitFor(t, 5*time.Second, "a and b joined", func() bool { return len(a.Members()) == 2 && len(b.Members()) == 2 })
	return a, b
}

// Suspect → kernel check at once (issue 22): a member whose probe fails
// and whose node does not answer is dropped without waiting for gossip's
// suspicion timeout (6 s here); when gossip then declares it dead nothing
// is counted twice. Without the early check it stays live for the 6 s.
func TestSuspectWhoseNodeIsSilentDroppedEarly(t *testing.T) {
	kernel := &fakeKernel{}
	a, b := suspectPair(t, kernel)
	drain(a)
	crash(b)
	start := time.Now()
	waitFor(t, 3*time.Second, "b dropped before the suspicion timeout", func() bool { return slices.Equal(a.Members(), []string{"a"}) })
	t.Logf("dropped %v after the crash", time.Since(start).Round(time.Millisecond))
	if f, e := value(a.met.failures), value(a.met.early); f != 1 || e != 1 {
		t.Fatalf("failures=%v early=%v, want 1 and 1", f, e)
	}
	waitFor(t, 15*time.Second, "gossip's own verdict", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.early) == 0
	})
	if f, h := value(a.met.failures), value(a.met.held); f != 1 || h != 0 || !slices.Equal(a.Members(), []string{"a"}) {
		t.Fatalf("after gossip's verdict: failures=%v held=%v members %v", f, h, a.Members())
	}
}

// A suspect whose node answers (a stalled agent) stays live until gossip
// decides, as before; one dropped early whose node answers again before
// gossip declared it dead is live again.
func TestSuspectWhoseNodeAnswersKept(t *testing.T) {
	kernel := &fakeKernel{}
	kernel.alive.Store(true)
	a, b := suspectPair(t, kernel)
	crash(b)
	waitFor(t, 3*time.Second, "b's node checked", func() bool { return kernel.asked.Load() > 0 })
	time.Sleep(500 * time.Millisecond)
	if got := a.Members(); !slices.Equal(got, []string{"a", "b"}) || value(a.met.early) != 0 {
		t.Fatalf("Members() = %v, early %v while b's node answers", got, value(a.met.early))
	}

	kernel2 := &fakeKernel{}
	a2, b2 := suspectPair(t, kernel2)
	crash(b2)
	waitFor(t, 3*time.Second, "b dropped early", func() bool { return slices.Equal(a2.Members(), []string{"a"}) })
	kernel2.alive.Store(true) // the link came back
	waitFor(t, 2*time.Second, "b live again", func() bool { return slices.Equal(a2.Members(), []string{"a", "b"}) })
}
