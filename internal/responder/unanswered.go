package responder

import "maps"

// Unanswered returns the interfaces of the desired table that the
// Manager cannot answer on (their sockets failed to open; retried every
// RetryInterval), by interface index, with the last error. Nil when it
// answers on all of them. The agent publishes them as problems of its
// addresses (its L2Announcer), so `mooring status` shows those addresses
// as not announced and why.
func (m *Manager) Unanswered() map[int]string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.unanswered)
}

// UnansweredChanges is signalled (coalesced) whenever Unanswered changes.
func (m *Manager) UnansweredChanges() <-chan struct{} { return m.unansweredc }

// wants reports whether the desired table has addresses on ifindex.
func (m *Manager) wants(ifindex int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.desired[ifindex]) > 0
}

// noteUnanswered forgets the failures of interfaces that are open now or
// no longer wanted and publishes the rest when they changed (a retry that
// fails the same way changes nothing, so the agent writes nothing).
func (s *runState) noteUnanswered() {
	for ifindex := range s.openErrs {
		if _, open := s.links[ifindex]; open || !s.m.wants(ifindex) {
			delete(s.openErrs, ifindex)
		}
	}
	m := s.m
	m.mu.Lock()
	changed := !maps.Equal(m.unanswered, s.openErrs)
	if changed {
		m.unanswered = nil
		if len(s.openErrs) > 0 {
			m.unanswered = maps.Clone(s.openErrs)
		}
	}
	m.mu.Unlock()
	if changed {
		select {
		case m.unansweredc <- struct{}{}:
		default:
		}
	}
}
