package membership

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Suspects: a member whose probe by this member fails (no direct ack
// within ProbeTimeout, then no indirect one within the probe interval) is
// only suspected by memberlist, which declares it dead after the suspicion
// timeout (SuspicionMult probe intervals and more). memberlist tells no
// delegate about failed probes or suspicions; it logs "Failed UDP ping:
// NAME (timeout reached)" and "Suspect NAME has failed, no acks received"
// (right before it marks the member suspect), and the logger hands either
// line to suspect. Only this member's own probes are seen; a member whose
// probe failed tells the others (suspect notices, below), so each checks
// at once too. With a
// NodeCheck configured, the member's node is checked at once: no answer
// confirms the death without waiting for the suspicion timeout (the member
// is dropped from the live set, as when gossip declares it dead); an
// answer (a stalled agent, a gossip partition) or a failed check changes
// nothing, and gossip's own verdict is handled as before (hold.go).
//
// A member dropped early whose node answers again before gossip declares
// it dead (a link that flapped) is live again: it never knew it was
// suspected long enough to be dropped, so it still answers for its
// addresses. It is re-checked every NodeCheckInterval until then.

// How memberlist (v0.7) logs a failed probe: the direct ping unanswered
// after ProbeTimeout, then the indirect ones too (the member is suspect).
var suspectLines = [][2]string{
	{"Failed UDP ping: ", " (timeout reached)"},
	{"Suspect ", " has failed, no acks received"},
}

// suspectOf returns the member a memberlist log line (level and
// "memberlist: " cut) says this member's probe found failing.
func suspectOf(line string) (string, bool) {
	for _, l := range suspectLines {
		rest, ok := strings.CutPrefix(line, l[0])
		if !ok {
			continue
		}
		if name, ok := strings.CutSuffix(rest, l[1]); ok && name != "" {
			return name, true
		}
	}
	return "", false
}

// check kinds (dueCheck, checkResult).
const (
	checkFailed  = iota // held or unreachable: gossip declared it failed (hold.go)
	checkSuspect        // a probe failed: confirm the death early
	checkEarly          // dropped early: does its node answer again?
)

// Suspect notices: memberlist gossips a suspicion but tells no delegate,
// and only this member's own probes are logged, so a member whose turn to
// probe the dead node has not come waits for its next probe of it or for
// gossip's verdict (the suspicion timeout, then a kernel check: ~0.55 s).
// So a member whose probe failed and that queues a check tells every other
// live member at once, best effort (a memberlist user message, encrypted
// and authenticated like all gossip): each runs its own kernel check at
// once, as after its own failed probe. A notice alone drops nobody — the
// receiver's own check decides, under the receiver's own guard — and a
// received notice is never passed on.

// msgSuspect marks a suspect notice (the first byte of a user message);
// the rest is the suspected member's name.
const msgSuspect byte = 's'

// probeFailed is suspect for this member's own failed probe of name (from
// memberlist's logger): when a check is queued, the other members are
// told. It must not block: the notices go out on their own goroutine.
func (m *Membership) probeFailed(name string) {
	if m.suspect(name) {
		go m.tellSuspect(name)
	}
}

// tellSuspect sends the suspect notice for name to every other live member.
func (m *Membership) tellSuspect(name string) {
	s := m.sender.Load()
	if s == nil {
		return
	}
	sent := m.sendToPeers(s, append([]byte{msgSuspect}, name...), "telling a peer of a failed probe of "+name+"; its own probe or gossip follows", name)
	m.met.suspectSent.Add(float64(sent))
}

// receiveSuspect checks the node of the member a peer's probe found
// failing, at once (suspect). A notice about this member itself, or one
// that is not live here, changes nothing.
func (m *Membership) receiveSuspect(b []byte) {
	name := string(b)
	if name == "" || name == m.cfg.NodeName {
		return
	}
	m.met.suspectReceived.Inc()
	m.suspect(name)
}

// suspect queues a check of name's node after a probe of it failed (this
// member's, or a peer's notice): one check at a time, at most one per
// ProbeTimeout (a node that answered the last check, its agent just
// killed, may have lost its link since: the next failed probe asks
// again). It reports whether it queued one. It must not block.
func (m *Membership) suspect(name string) bool {
	if m.cfg.NodeCheck == nil {
		return false
	}
	m.mu.Lock()
	where, live := m.live[name]
	ap, err := netip.ParseAddrPort(where)
	if !live || m.held[name] != nil || err != nil || ap.Addr().Unmap().IsUnspecified() {
		m.mu.Unlock()
		return false
	}
	s := m.suspects[name]
	if s == nil {
		s = &held{addr: ap.Addr().Unmap(), since: time.Now()}
		m.suspects[name] = s
	}
	if s.checking || !s.checked.IsZero() && time.Since(s.checked) < m.cfg.ProbeTimeout {
		m.mu.Unlock()
		return false
	}
	queued := !s.due
	s.due, s.failed = true, time.Now()
	m.mu.Unlock()
	select {
	case m.holdKick <- struct{}{}:
	default:
	}
	return queued
}

// dueSuspects marks and appends the suspects due their one check and the
// members dropped early due a re-check. Called with m.mu held.
func (m *Membership) dueSuspects(out []dueCheck, now time.Time) []dueCheck {
	for name, s := range m.suspects {
		if s.due && !s.checking {
			s.due, s.checking = false, true
			out = append(out, dueCheck{name: name, addr: s.addr, kind: checkSuspect})
		}
	}
	for name, e := range m.early {
		if !e.checking && now.Sub(e.checked) >= m.cfg.NodeCheckInterval {
			e.checking = true
			out = append(out, dueCheck{name: name, addr: e.addr, kind: checkEarly})
		}
	}
	return out
}

// checkedSuspect handles the result of a suspect's or an early-dropped
// member's check; it reports whether r was one.
func (m *Membership) checkedSuspect(r checkResult) bool {
	switch r.kind {
	case checkSuspect:
		m.checkedProbeFailure(r)
	case checkEarly:
		m.checkedEarly(r)
	default:
		return false
	}
	return true
}

// checkedProbeFailure drops a suspect whose node does not answer.
func (m *Membership) checkedProbeFailure(r checkResult) {
	m.mu.Lock()
	s := checkDone(m.suspects, r.name)
	if s == nil {
		m.mu.Unlock()
		return
	}
	_, live := m.live[r.name]
	if r.err != nil || r.alive || !live || m.held[r.name] != nil {
		m.mu.Unlock() // it answers, or cannot be checked: gossip decides, as before
		return
	}
	if why := m.distrust(s.failed, r.took); why != "" {
		m.met.earlyDistrusted.Inc()
		m.mu.Unlock()
		m.log.Info("a member's probe failed and its node did not answer, but this agent cannot trust that: gossip decides", "node", r.name, "because", why)
		return
	}
	delete(m.suspects, r.name)
	m.early[r.name] = &held{addr: s.addr, since: s.since, checked: s.checked, where: m.live[r.name], meta: m.metas[r.name]}
	m.drop(r.name)
	m.met.early.Inc()
	count := len(m.live)
	m.mu.Unlock()
	m.log.Warn("member failed: its probe failed and its node does not answer ARP/NDP (confirmed without waiting for gossip's suspicion)",
		"node", r.name, "addr", s.addr, "after", time.Since(s.since).Round(time.Millisecond), "live", count)
	m.notify()
}

// checkedEarly makes a member dropped early live again when its node
// answers before gossip declared it dead.
func (m *Membership) checkedEarly(r checkResult) {
	m.mu.Lock()
	e := checkDone(m.early, r.name)
	if e == nil {
		m.mu.Unlock()
		return
	}
	if r.err != nil || !r.alive {
		m.mu.Unlock()
		return
	}
	delete(m.early, r.name)
	m.live[r.name] = e.where
	m.metas[r.name] = e.meta
	count := len(m.live)
	m.met.live.Set(float64(count))
	m.mu.Unlock()
	m.log.Warn("member back: its node answers again and gossip never declared it dead (a link that flapped?)", "node", r.name, "live", count)
	m.notify()
}

// checkDone marks name's check in set done now and returns its entry (nil:
// gossip decided meanwhile). Called with m.mu held.
func checkDone(set map[string]*held, name string) *held {
	h := set[name]
	if h != nil {
		h.checking, h.checked = false, time.Now()
	}
	return h
}

// forgetSuspect ends a suspicion when gossip decides (a join or a leave);
// it reports whether the member had been dropped early. Called with m.mu
// held.
func (m *Membership) forgetSuspect(name string) bool {
	delete(m.suspects, name)
	_, early := m.early[name]
	delete(m.early, name)
	return early
}

// The guard of the early drop. A probe that failed and a kernel check that
// got no answer prove a peer dead only if this agent itself ran on time:
// an agent that was stopped or starved (a resumed SIGSTOP, a CPU-starved
// node) sees its own probes time out and its own check's wait end before
// it read the answer, and would drop a live peer and answer beside it for
// that peer's addresses (seen once in CI before this guard). So the early
// drop is refused, and gossip's suspicion (whose window lets the peer's
// acks refute) decides as before, when this agent's own beat lagged since
// shortly before the probe failed, or when the check took much longer than
// its wait (unless the check is late-safe: Config.NodeCheckLateSafe).

// beatEvery is how often holdLoop's ticker beats; a tick delivered more
// than lagLimit late is a gap in this agent's own running.
func (m *Membership) beatEvery() time.Duration {
	return max(m.cfg.ProbeInterval/2, 10*time.Millisecond)
}

func (m *Membership) lagLimit() time.Duration { return max(m.cfg.ProbeTimeout/2, 20*time.Millisecond) }

// beat notes a tick that fired at t: delivered late, it marks a gap in
// this agent's running (lastGap), which makes early drops untrusted for a
// while (distrust).
func (m *Membership) beat(t time.Time) {
	now := time.Now()
	if now.Sub(t) <= m.lagLimit() {
		return
	}
	m.mu.Lock()
	m.lastGap = now
	m.mu.Unlock()
}

// distrust says why an early drop whose probe last failed at failed, after
// a check that took took, cannot be trusted ("" when it can). Called with
// m.mu held.
func (m *Membership) distrust(failed time.Time, took time.Duration) string {
	// The failed probe started up to a probe interval and timeout before
	// it was logged; a gap since then may be what made it fail.
	window := m.cfg.ProbeInterval + m.cfg.ProbeTimeout
	switch {
	case !m.lastGap.IsZero() && m.lastGap.After(failed.Add(-window)):
		return fmt.Sprintf("this agent itself ran late (its beat lagged %s from the failed probe)", m.lastGap.Sub(failed).Round(time.Millisecond))
	case !m.cfg.NodeCheckLateSafe && took > m.cfg.NodeCheckWait+max(m.cfg.NodeCheckWait/2, 50*time.Millisecond):
		return fmt.Sprintf("the check took %s, more than its %s wait allows", took.Round(time.Millisecond), m.cfg.NodeCheckWait)
	}
	return ""
}
