package mailbox

import "sync"

// Box holds the latest value of something and wakes one reader: slow
// consumers (API writes, probes) skip stale intermediate values instead of
// queueing them, and never hold up the producer (the decision loop).
type Box[T any] struct {
	mu   sync.Mutex
	val  T
	set  bool
	kick chan struct{}
}

// New returns an empty box.
func New[T any]() *Box[T] { return &Box[T]{kick: make(chan struct{}, 1)} }

// Put replaces the value and wakes the reader.
func (m *Box[T]) Put(v T) {
	m.mu.Lock()
	m.val, m.set = v, true
	m.mu.Unlock()
	Poke(m.kick)
}

// Get returns the latest value and whether there has been one.
func (m *Box[T]) Get() (T, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.val, m.set
}

// Ready fires after a Put.
func (m *Box[T]) Ready() <-chan struct{} { return m.kick }

// Poke sends on a 1-buffered channel without blocking: one pending wake-up
// is enough.
func Poke(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
