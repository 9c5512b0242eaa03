package handoff

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// AfterClosed is a context that ends once ctx has ended and done is
// closed: on SIGTERM gossip leaves only after the responder has stopped
// answering, so peers take over at once from a node that no longer
// answers: never two responders, nothing sent after the leave.
func AfterClosed(ctx context.Context, done <-chan struct{}) context.Context {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		<-ctx.Done()
		<-done
		cancel()
	}()
	return out
}

// A stalled agent (SIGSTOP, CPU starvation) longer than its peers wait for
// it (--agent-loss-timeout once gossip declared it failed; about a second
// with the kernel check off) comes back with a stale decision: its peers
// have taken its addresses meanwhile. It must not answer, re-announce (the
// split-brain probe would see the peer answering) or pull clients back
// from that decision. It notices the stall as a gap in the monotonic
// clock between two beats of Run (or of any loop that beats) and
// then comes back as a returning agent: no candidate at once, so it stops
// answering, hold-down, then readiness, then its addresses once its peers
// have confirmed that they let them go.

// wakeBeat paces Run: a gap is measured to the last beat.
const wakeBeat = 200 * time.Millisecond

// Stall notices stalls of the whole process. Safe for concurrent use.
type Stall struct {
	// now reads the monotonic clock (time.Since of a fixed instant): a
	// stall is the process's own, whatever clock the decisions use.
	now       func() time.Duration
	threshold time.Duration // 0: never
	kick      func()        // asks for a decision when a stall is noticed
	running   atomic.Bool   // Run beats: only then are gaps stalls
	last      atomic.Int64  // the last beat, by now
	seen      atomic.Uint64
	handled   atomic.Uint64
	gap       atomic.Int64 // the last stall noticed
	mu        sync.Mutex   // serialises counting a stall
	resumes   prometheus.Counter
}

// NewStall counts a gap of more than threshold (0: never) between beats
// as a stall and calls kick when it notices one.
func NewStall(threshold time.Duration, kick func(), reg prometheus.Registerer) *Stall {
	base := time.Now()
	return &Stall{now: func() time.Duration { return time.Since(base) }, threshold: threshold, kick: kick,
		resumes: promauto.With(reg).NewCounter(prometheus.CounterOpts{Name: "mooring_agent_stall_resumes_total",
			Help: "Times this agent resumed after not running for longer than its peers wait for it (SIGSTOP, CPU starvation) and held down instead of serving its stale decision."})}
}

// SetMonotonic replaces the process's monotonic clock and begins the
// beats (tests: a stall without stopping the process).
func (w *Stall) SetMonotonic(now func() time.Duration) {
	w.now = now
	w.start()
}

// start begins the beats (Run).
func (w *Stall) start() {
	w.last.Store(int64(w.now()))
	w.running.Store(true)
}

// beat notes that the process runs now and reports whether it had not run
// for longer than the threshold since the last beat (a stall: one caller
// sees each, and asks for a decision).
func (w *Stall) beat() bool {
	if !w.running.Load() || w.threshold <= 0 {
		return false
	}
	now := int64(w.now())
	prev := w.last.Load()
	if prev >= now || time.Duration(now-prev) <= w.threshold {
		w.last.CompareAndSwap(prev, now)
		return false
	}
	// The stall is counted before the new beat is published: a beat of
	// another goroutine in between still sees the gap, so no caller of
	// pending can miss it (and answer from the stale table). Only the
	// caller whose swap wins counts it.
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.last.Load() != prev {
		return false // another beat counted it (or it was no stall)
	}
	w.gap.Store(now - prev)
	w.seen.Add(1)
	w.last.Store(now)
	if w.kick != nil {
		w.kick()
	}
	return true
}

// Pending reports a stall the decision loop has not acted on yet; it
// beats first, so that whichever loop runs first after a stall sees it.
func (w *Stall) Pending() bool {
	w.beat()
	return w.seen.Load() != w.handled.Load()
}

// Handle marks the stalls noticed so far as acted on and returns the last
// one's length; ok is false when none was pending.
func (w *Stall) Handle() (gap time.Duration, ok bool) {
	if !w.Pending() {
		return 0, false
	}
	w.handled.Store(w.seen.Load())
	return time.Duration(w.gap.Load()), true
}

// Counted counts a stall the agent acted on (after its first decision).
func (w *Stall) Counted() { w.resumes.Inc() }

// Threshold is the shortest gap counted as a stall.
func (w *Stall) Threshold() time.Duration { return w.threshold }

// Run beats every wakeBeat until ctx ends, so that a resumed process
// notices its stall at once.
func (w *Stall) Run(ctx context.Context) error {
	w.start()
	tick := time.NewTicker(wakeBeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			w.beat()
		}
	}
}
