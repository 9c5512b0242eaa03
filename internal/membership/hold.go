package membership

import (
	"context"
	"maps"
	"net/netip"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// NodeCheck asks whether the node at addr still answers at the link layer
// (its kernel replies to ARP or neighbour solicitation). A live kernel
// answers even while its agent is stalled (SIGSTOP, CPU starvation, a long
// GC); a dead node, or one whose link is down, does not. An error means
// the question could not be asked (no route on the segment, no socket).
type NodeCheck func(ctx context.Context, addr netip.Addr) (alive bool, err error)

// held is a member that gossip declared failed but whose node answered:
// it stays in the live set until it refutes (its agent resumes), its node
// stops answering, or AgentLossTimeout passes. Guarded by Membership.mu.
type held struct {
	addr     netip.Addr
	since    time.Time
	checking bool
	checked  time.Time // last answer; zero before the first
	due      bool      // a suspect: a probe failed, check it (suspect.go)
	failed   time.Time // a suspect: when its probe was last seen failing
	where    string    // dropped early: its gossip address and metadata (suspect.go)
	meta     []byte
}

// hold keeps a failed member live while its node is checked, when a
// NodeCheck is configured and the member's address is usable. It reports
// whether the member was held. Called with m.mu held, from memberlist's
// event delegate: it must not block.
func (m *Membership) hold(n *memberlist.Node) bool {
	if m.cfg.NodeCheck == nil {
		return false
	}
	if _, ok := m.live[n.Name]; !ok {
		return false
	}
	addr, ok := netip.AddrFromSlice(n.Addr)
	if !ok || !addr.IsValid() || addr.Unmap().IsUnspecified() {
		return false
	}
	if _, ok := m.held[n.Name]; !ok {
		m.held[n.Name] = &held{addr: addr.Unmap(), since: time.Now()}
		m.met.held.Set(float64(len(m.held)))
	}
	select {
	case m.holdKick <- struct{}{}:
	default:
	}
	return true
}

// unhold forgets a held member that came back; it reports whether it was
// held. Called with m.mu held.
func (m *Membership) unhold(name string) bool {
	if _, ok := m.held[name]; !ok {
		return false
	}
	delete(m.held, name)
	m.met.held.Set(float64(len(m.held)))
	m.met.refuted.Inc()
	return true
}

type checkResult struct {
	name  string
	kind  int // checkFailed, checkSuspect, checkEarly (suspect.go)
	alive bool
	err   error
	took  time.Duration // the check's own wall time (suspect.go trusts a slow one less)
}

// holdLoop checks held members' nodes: at once when held, then every
// NodeCheckInterval, and drops a member whose node does not answer or whose
// AgentLossTimeout has passed. It owns the check goroutines.
func (m *Membership) holdLoop(ctx context.Context) {
	results := make(chan checkResult)
	tick := time.NewTicker(m.beatEvery())
	defer tick.Stop()
	done := make(chan struct{})
	running := 0
	defer func() {
		close(done)
		for ; running > 0; running-- {
			<-results
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case r := <-results:
			running--
			m.checked(r)
		case <-m.holdKick:
		case t := <-tick.C:
			m.beat(t)
		}
		for _, c := range m.dueChecks() {
			running++
			go func() {
				cctx, cancel := context.WithTimeout(ctx, m.cfg.NodeCheckWait+time.Second)
				start := time.Now()
				alive, err := m.cfg.NodeCheck(cctx, c.addr)
				took := time.Since(start)
				cancel()
				select {
				case results <- checkResult{name: c.name, kind: c.kind, alive: alive, err: err, took: took}:
				case <-done:
					results <- checkResult{} // counted by the deferred drain
				}
			}()
		}
		m.expire()
	}
}

type dueCheck struct {
	name string
	addr netip.Addr
	kind int
}

// dueChecks marks and returns the held members whose node is due a check.
func (m *Membership) dueChecks() []dueCheck {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []dueCheck
	now := time.Now()
	for _, set := range []map[string]*held{m.held, m.unreachable} {
		for name, h := range set {
			if h.checking || !h.checked.IsZero() && now.Sub(h.checked) < m.cfg.NodeCheckInterval {
				continue
			}
			h.checking = true
			out = append(out, dueCheck{name: name, addr: h.addr})
		}
	}
	return m.dueSuspects(out, now)
}

func (m *Membership) checked(r checkResult) {
	if r.name == "" || m.checkedSuspect(r) {
		return
	}
	m.mu.Lock()
	if u, ok := m.unreachable[r.name]; ok && m.held[r.name] == nil {
		u.checking = false
		u.checked = time.Now()
		if r.err != nil || !r.alive { // its node is gone too: no partition
			delete(m.unreachable, r.name)
			m.mu.Unlock()
			m.log.Info("an unreachable member's node stopped answering: counted as dead", "node", r.name)
			m.notify()
			return
		}
		m.mu.Unlock()
		return
	}
	h, ok := m.held[r.name]
	if !ok { // came back meanwhile
		m.mu.Unlock()
		return
	}
	h.checking = false
	if r.err == nil && r.alive {
		first := h.checked.IsZero()
		h.checked = time.Now()
		m.mu.Unlock()
		if first {
			m.log.Warn("gossip declared a member failed but its node answers ARP/NDP: its agent is stalled or restarting; keeping it",
				"node", r.name, "addr", h.addr, "for at most", m.cfg.AgentLossTimeout)
			m.notify() // Held changed (the agent's partition rule reads it)
		}
		return
	}
	m.drop(r.name)
	m.mu.Unlock()
	if r.err != nil {
		m.log.Warn("member failed (its node could not be checked)", "node", r.name, "addr", h.addr, "err", r.err)
	} else {
		m.log.Warn("member failed: gossip lost it and its node does not answer ARP/NDP", "node", r.name, "addr", h.addr)
	}
	m.notify()
}

// expire drops held members whose agent has been gone for AgentLossTimeout.
func (m *Membership) expire() {
	m.mu.Lock()
	var gone []string
	for name, h := range m.held {
		if time.Since(h.since) >= m.cfg.AgentLossTimeout {
			m.drop(name)
			gone = append(gone, name)
			if !h.checked.IsZero() {
				// Its node answered all along: its agent is gone, or
				// gossip is cut between us (a partition; see Unreachable).
				m.unreachable[name] = &held{addr: h.addr, since: h.since, checked: h.checked}
			}
		}
	}
	m.mu.Unlock()
	for _, name := range gone {
		m.log.Warn("member failed: its node answers but its agent has not come back", "node", name, "after", m.cfg.AgentLossTimeout)
		m.notify()
	}
}

// drop removes a held member from the live set. Called with m.mu held.
func (m *Membership) drop(name string) {
	delete(m.held, name)
	delete(m.live, name)
	delete(m.metas, name)
	m.met.held.Set(float64(len(m.held)))
	m.met.failures.Inc()
	m.met.live.Set(float64(len(m.live)))
}

// Unreachable returns, sorted, the members that gossip lost while their
// node kept answering ARP/NDP past AgentLossTimeout: their agent is gone,
// or gossip is cut between us while the segment works (a partition). Each
// is re-checked every NodeCheckInterval and forgotten once it rejoins or
// its node stops answering. The agent uses it to tell a majority from a
// minority (fail-safe partitions).
func (m *Membership) Unreachable() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.unreachable))
}

// Held returns, sorted, the members gossip declared failed whose node
// answered the check: their agent is stalled, or gossip is cut between us
// (a partition). They stay live (Members) until they refute, their node
// stops answering, Release, or AgentLossTimeout.
func (m *Membership) Held() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []string
	for name, h := range m.held {
		if !h.checked.IsZero() {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// Release drops a held member now, as unreachable, as AgentLossTimeout
// would: the caller has learnt another way (its agent said so through the
// API server) that its agent runs but is cut from us. It reports whether
// the member was held.
func (m *Membership) Release(name string) bool {
	m.mu.Lock()
	h, ok := m.held[name]
	if !ok || h.checked.IsZero() {
		m.mu.Unlock()
		return false
	}
	m.drop(name)
	m.unreachable[name] = &held{addr: h.addr, since: h.since, checked: h.checked}
	m.mu.Unlock()
	m.log.Warn("member released: its agent runs but gossip is cut between us (a partition)", "node", name, "after", time.Since(h.since).Round(time.Millisecond))
	m.notify()
	return true
}
