package membership

import (
	"fmt"
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

// The early drop's guard: a gap in this agent's own running shortly before
// the failed probe, or a check that ran far past its wait, is no proof.
func TestDistrustEarlyDrop(t *testing.T) {
	m, err := New(Config{NodeName: "a", BindAddr: "127.0.0.1", Insecure: true}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	window := m.cfg.ProbeInterval + m.cfg.ProbeTimeout
	for _, tc := range []struct {
		name    string
		gap     time.Time
		took    time.Duration
		distrun bool
	}{
		{"no gap, a check within its wait", time.Time{}, m.cfg.NodeCheckWait, false},
		{"a gap long before the probe", failed.Add(-window - time.Second), m.cfg.NodeCheckWait, false},
		{"a gap while the probe ran", failed.Add(-window / 2), m.cfg.NodeCheckWait, true},
		{"a gap after the probe failed", failed.Add(time.Millisecond), m.cfg.NodeCheckWait, true},
		{"a check that ran late", time.Time{}, 3 * m.cfg.NodeCheckWait, true},
	} {
		m.lastGap = tc.gap
		if why := m.distrust(failed, tc.took); (why != "") != tc.distrun {
			t.Errorf("%s: distrust = %q, want distrusted=%v", tc.name, why, tc.distrun)
		}
	}
	// A late-safe check (it read every answer that came within its wait
	// before concluding) is trusted however late it ran; a gap in this
	// agent's own running still is not.
	m.cfg.NodeCheckLateSafe = true
	m.lastGap = time.Time{}
	if why := m.distrust(failed, 3*m.cfg.NodeCheckWait); why != "" {
		t.Errorf("late-safe check that ran late: distrust = %q, want trusted", why)
	}
	m.lastGap = failed.Add(time.Millisecond)
	if why := m.distrust(failed, m.cfg.NodeCheckWait); why == "" {
		t.Error("late-safe check after a gap in this agent's running: trusted, want distrusted")
	}
}

// An agent that keeps running late (a starved node) never drops a peer
// early, even when the peer's probe fails and its node is silent: gossip's
// suspicion decides. Without the guard b is dropped within a second.
func TestSuspectNotDroppedEarlyWhileThisAgentRunsLate(t *testing.T) {
	kernel := &fakeKernel{}
	a, b := suspectPair(t, kernel)
	stop := make(chan struct{})
	defer close(stop)
	go func() { // this agent's beat comes late, again and again
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
				a.beat(time.Now().Add(-time.Second))
			}
		}
	}()
	drain(a)
	crash(b)
	waitFor(t, 3*time.Second, "b's node checked", func() bool { return kernel.asked.Load() > 0 })
	time.Sleep(time.Second)
	if got := a.Members(); !slices.Equal(got, []string{"a", "b"}) || value(a.met.early) != 0 || value(a.met.earlyDistrusted) == 0 {
		t.Fatalf("Members() = %v, early %v, distrusted %v: a lagging agent dropped a peer early", got, value(a.met.early), value(a.met.earlyDistrusted))
	}
}

// A peer's failed probe reaches a member whose own turn to probe the dead
// member has not come: b never probes within the test (one probe an hour)
// and its suspicion would last 30 hours, yet it drops the crashed c early,
// told by a, its own kernel check deciding. Without the notice b waits for
// a's gossiped verdict (30 × a's 200 ms probe interval = 6 s).
func TestSuspectNoticeChecksAtOnce(t *testing.T) {
	kernel := &fakeKernel{} // every node silent: a crashed c, its link gone
	a, _ := runMember(t, Config{NodeName: "a", BindAddr: "127.0.0.1", NodeCheck: kernel.check, SuspicionMult: 30,
		NodeCheckInterval: 50 * time.Millisecond, AgentLossTimeout: time.Minute, Insecure: true})
	b, _ := runMember(t, Config{NodeName: "b", BindAddr: "127.0.0.1", NodeCheck: kernel.check, SuspicionMult: 30,
		ProbeInterval: time.Hour, NodeCheckInterval: 50 * time.Millisecond, AgentLossTimeout: time.Minute, Insecure: true})
	c, _ := runMember(t, Config{NodeName: "c", BindAddr: "127.0.0.1", SuspicionMult: 30, Insecure: true})
	waitFor(t, 5*time.Second, "a listening", func() bool { return a.Addr() != "" })
	b.SetPeers([]string{a.Addr()})
	c.SetPeers([]string{a.Addr()})
	for _, m := range []*member{a, b, c} {
		waitFor(t, 5*time.Second, "full membership", func() bool { return len(m.Members()) == 3 })
	}
	crash(c)
	start := time.Now()
	waitFor(t, 3*time.Second, "b dropped c before a's gossip could tell it", func() bool { return slices.Equal(b.Members(), []string{"a", "b"}) })
	t.Logf("b dropped c %v after the crash", time.Since(start).Round(time.Millisecond))
	if e, r, s := value(b.met.early), value(b.met.suspectReceived), value(a.met.suspectSent); e != 1 || r < 1 || s < 1 {
		t.Fatalf("b: early drops %v, notices received %v; a: notices sent %v; want 1, >= 1, >= 1", e, r, s)
	}
	if s := value(b.met.suspectSent); s != 0 {
		t.Errorf("b passed a notice on (%v sent): only a member's own failed probe is told", s)
	}
}

// A notice alone drops nobody: the receiver's own check decides, so a
// member whose node still answers stays.
func TestSuspectNoticeWhoseNodeAnswersChangesNothing(t *testing.T) {
	kernel := &fakeKernel{}
	kernel.alive.Store(true)
	a, _ := suspectPair(t, kernel)
	drain(a)
	(*delegate)(a.Membership).NotifyMsg(append([]byte{msgSuspect}, "b"...))
	waitFor(t, 3*time.Second, "a checked b's node", func() bool { return kernel.asked.Load() > 0 })
	time.Sleep(200 * time.Millisecond)
	if !slices.Equal(a.Members(), []string{"a", "b"}) || value(a.met.early) != 0 || value(a.met.suspectReceived) != 1 {
		t.Fatalf("after a notice about b, whose node answers: members %v, early %v, received %v", a.Members(), value(a.met.early), value(a.met.suspectReceived))
	}
}

// A hostile or broken member (one holding the gossip key) floods notices:
// about a member whose node answers, about itself-the-receiver, about
// names nobody knows, and garbage. Nothing moves, the receiver keeps no
// state for unknown names, and the kernel checks stay bounded by the
// receiver's own pace (one per member per ProbeTimeout, one at a time),
// not by the flood's.
func TestSuspectNoticeFloodIsBounded(t *testing.T) {
	kernel := &fakeKernel{}
	kernel.alive.Store(true)
	a, _ := suspectPair(t, kernel)
	drain(a)
	d := (*delegate)(a.Membership)
	start := time.Now()
	flood := 0
	for i := 0; time.Since(start) < time.Second; i++ {
		flood++
		switch i % 4 {
		case 0:
			d.NotifyMsg(append([]byte{msgSuspect}, "b"...))
		case 1:
			d.NotifyMsg(append([]byte{msgSuspect}, "a"...))
		case 2:
			d.NotifyMsg(append([]byte{msgSuspect}, fmt.Sprintf("ghost-%d", i)...))
		default:
			d.NotifyMsg([]byte{msgSuspect})
		}
	}
	took := time.Since(start)
	if flood < 1000 {
		t.Fatalf("only %d notices in %v", flood, took)
	}
	time.Sleep(300 * time.Millisecond) // let queued checks finish
	elapsed := time.Since(start)
	asked := int(kernel.asked.Load())
	// One check per ProbeTimeout (100 ms) at most while the flood lasts,
	// plus the one in flight at its end.
	limit := int(elapsed/a.cfg.ProbeTimeout) + 2
	t.Logf("%d notices in %v: %d kernel checks over %v (limit %d)", flood, took.Round(time.Millisecond), asked, elapsed.Round(time.Millisecond), limit)
	if asked == 0 || asked > limit {
		t.Fatalf("%d kernel checks for %d notices over %v; want 1..%d", asked, flood, elapsed, limit)
	}
	if !slices.Equal(a.Members(), []string{"a", "b"}) || value(a.met.early) != 0 {
		t.Fatalf("after the flood: members %v, early drops %v; want a and b, 0", a.Members(), value(a.met.early))
	}
	a.mu.Lock()
	kept := len(a.suspects)
	a.mu.Unlock()
	if kept > 1 {
		t.Fatalf("a keeps %d suspects after notices about unknown names; want at most b's", kept)
	}
}
