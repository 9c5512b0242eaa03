package agent

import "sync"

// mailbox holds the latest value of something and wakes one reader: slow
// consumers (API writes, probes) skip stale intermediate values instead of
// queueing them, and never hold up the producer (the decision loop).
type mailbox[T any] struct {
	mu   sync.Mutex
	val  T
	set  bool
	kick chan struct{}
}

func newMailbox[T any]() *mailbox[T] { return &mailbox[T]{kick: make(chan struct{}, 1)} }

func (m *mailbox[T]) put(v T) {
	m.mu.Lock()
	m.val, m.set = v, true
	m.mu.Unlock()
	poke(m.kick)
}

// get returns the latest value and whether there has been one.
func (m *mailbox[T]) get() (T, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.val, m.set
}

// ready fires after a put.
func (m *mailbox[T]) ready() <-chan struct{} { return m.kick }

// poke sends on a 1-buffered channel without blocking: one pending wake-up
// is enough.
func poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
