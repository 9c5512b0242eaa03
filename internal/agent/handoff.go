package agent

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Planned hand-offs. A node that gets the
// node.kubernetes.io/exclude-from-external-load-balancers label (a drain's
// first step) lets its addresses go and publishes that it is no candidate;
// its peers take them when that reaches them by gossip, so no address has
// two responders on the way (capabilities). When the label goes, the node
// comes back as a restarted agent does: no candidate for --hold-down, then
// it publishes its readiness and takes its addresses TakeDelay later, once
// its peers have let them go.

// excludedReturn notes this node's exclusion and, when it ends, starts the
// hold-down (holdDown then publishes readiness and delays the take).
func (a *Agent) excludedReturn(ctx context.Context, excluded bool) {
	e := a.elig
	switch {
	case excluded && !e.excluded:
		e.excluded = true
		a.log.Info("this Node is excluded from external load balancers: letting its addresses go", "label", "node.kubernetes.io/exclude-from-external-load-balancers")
	case !excluded && e.excluded:
		e.excluded = false
		if !e.started {
			return // the first decision: holdDown decides
		}
		e.returning = true
		e.since = 0
		e.readyAt = a.deps.Clock.Now().Add(a.cfg.HoldDown)
		a.log.Info("this Node is no longer excluded: holding back before taking addresses", "for", a.cfg.HoldDown)
		a.triggerAfter(ctx, a.cfg.HoldDown)
	}
}

// afterClosed is a context that ends once ctx has ended and done is
// closed: gossip leaves only after the responder has stopped answering.
func afterClosed(ctx context.Context, done <-chan struct{}) context.Context {
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
// clock between two beats of wakeLoop (or of any loop that beats) and
// then comes back as a returning agent: no candidate at once, so it stops
// answering, hold-down, then readiness, then its addresses TakeDelay
// later, once its peers have let them go.

// wakeBeat paces wakeLoop: a gap is measured to the last beat.
const wakeBeat = 200 * time.Millisecond

// wakeWatch notices stalls of the whole process. Safe for concurrent use.
type wakeWatch struct {
	// now reads the monotonic clock (time.Since of a fixed instant): a
	// stall is the process's own, whatever clock the decisions use.
	now       func() time.Duration
	threshold time.Duration // 0: never
	kick      func()        // asks for a decision when a stall is noticed
	running   atomic.Bool   // wakeLoop beats: only then are gaps stalls
	last      atomic.Int64  // the last beat, by now
	seen      atomic.Uint64
	handled   atomic.Uint64
	gap       atomic.Int64 // the last stall noticed
	mu        sync.Mutex   // serialises counting a stall
	resumes   prometheus.Counter
}

func newWakeWatch(threshold time.Duration, kick func(), reg prometheus.Registerer) *wakeWatch {
	base := time.Now()
	w := &wakeWatch{now: func() time.Duration { return time.Since(base) }, threshold: threshold, kick: kick,
		resumes: prometheus.NewCounter(prometheus.CounterOpts{Name: "mooring_agent_stall_resumes_total",
			Help: "Times this agent resumed after not running for longer than its peers wait for it (SIGSTOP, CPU starvation) and held down instead of serving its stale decision."})}
	if reg != nil {
		reg.MustRegister(w.resumes)
	}
	return w
}

// resumeThreshold is the shortest stall after which peers may have taken
// this node's addresses: with the kernel check on they hold a failed
// member whose node answers for AgentLossTimeout after gossip declared it
// failed, so a shorter stall is harmless (the 2 s SIGSTOPs move
// nothing); without it gossip alone decides within about a second.
func resumeThreshold(cfg Config) time.Duration {
	if cfg.NodeCheckWait <= 0 {
		return min(time.Second, cfg.AgentLossTimeout)
	}
	return cfg.AgentLossTimeout
}

// start begins the beats (wakeLoop).
func (w *wakeWatch) start() {
	w.last.Store(int64(w.now()))
	w.running.Store(true)
}

// beat notes that the process runs now and reports whether it had not run
// for longer than the threshold since the last beat (a stall: one caller
// sees each, and asks for a decision).
func (w *wakeWatch) beat() bool {
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

// pending reports a stall the decision loop has not acted on yet; it beats
// first, so that whichever loop runs first after a stall sees it.
func (w *wakeWatch) pending() bool {
	w.beat()
	return w.seen.Load() != w.handled.Load()
}

// wakeLoop beats every wakeBeat, so that a resumed process notices its
// stall at once.
func (a *Agent) wakeLoop(ctx context.Context) error {
	a.wake.start()
	tick := time.NewTicker(wakeBeat)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
			a.wake.beat()
		}
	}
}

// stalled reports whether the responder must stay silent: a stall the
// decision loop has not acted on yet, or a returning agent's hold-down
// (whose table is empty anyway). It beats, so the first reply the
// responder would send after a stall (an answer to a request queued
// during it) already sees the stall.
func (a *Agent) stalled() bool {
	return a.wake.pending() || a.ready.holding.Load()
}

// resumed is called by the decision loop before each decision: after a
// stall it drops the stale decision by becoming a returning agent (no
// candidate for --hold-down, see holdDown) and reports that it did, so
// that the caller re-reads what eligibility depends on.
func (a *Agent) resumed(ctx context.Context) bool {
	w := a.wake
	if !w.pending() {
		return false
	}
	a.ready.holding.Store(true) // the split-brain probe stands still from now on
	w.handled.Store(w.seen.Load())
	e := a.elig
	if !e.started {
		return false // before the first decision: holdDown decides
	}
	w.resumes.Inc()
	a.log.Warn("this agent did not run for longer than its peers wait for it: its decision is stale, so it stops answering and holds back before taking addresses",
		"stalled", time.Duration(w.gap.Load()).Round(time.Millisecond), "threshold", w.threshold, "hold down", a.cfg.HoldDown)
	e.returning = true
	e.since = 0
	e.takeAt = time.Time{}
	e.readyAt = a.deps.Clock.Now().Add(a.cfg.HoldDown)
	a.triggerAfter(ctx, a.cfg.HoldDown)
	return true
}
