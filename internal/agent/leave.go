package agent

import (
	"context"
	"sync"
	"time"
)

// Leaving make before break (docs/l2.md "Planned hand-offs"): on SIGTERM
// (a rolling update, a drain) the agent does not stop answering at once.
// Its decision loop runs one more pass in which this node is no candidate
// and publishes so (not ready, leaving); the addresses it answered go to
// its peers, and for LetGoWait it answers for each with the MAC of the
// peer that takes it (handing.go), while that peer hears it and takes.
// Only then does the responder close and gossip leave (AfterClosed). The
// rest of the agent (status, safety checks, backends, eviction) stops at
// the signal as before. Closing first left one gossip round in which
// nobody answered.

// leaveApplyWait bounds the wait for the leaving pass: an agent whose loop
// is stuck still stops.
const leaveApplyWait = 2 * time.Second

// leaveState tells the decision loop that the agent is leaving (begun
// closes) and the leaving goroutine that the loop's pass reached the
// responder (applied closes). newLeaveState makes it; an agent run
// without runAll (tests) never leaves.
type leaveState struct {
	begun, applied         chan struct{}
	beginOnce, appliedOnce sync.Once
}

func newLeaveState() *leaveState {
	return &leaveState{begun: make(chan struct{}), applied: make(chan struct{})}
}

// leaving reports whether the agent is leaving.
func (l *leaveState) leaving() bool {
	select {
	case <-l.begun:
		return true
	default:
		return false
	}
}

// begin marks the agent leaving.
func (l *leaveState) begin() { l.beginOnce.Do(func() { close(l.begun) }) }

// done records that the leaving pass reached the responder.
func (l *leaveState) done() { l.appliedOnce.Do(func() { close(l.applied) }) }

// lingering returns the context the responder, gossip, the caches and the
// decision loop run on: it ends once ctx has ended and the agent has
// handed its addresses over (the leaving pass applied, then LetGoWait),
// or at once when the agent never decided (it answers nothing).
func (a *Agent) lingering(ctx context.Context) context.Context {
	out, cancel := context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		defer cancel()
		<-ctx.Done()
		if !a.ready.Decided.Load() {
			return
		}
		a.leave.begin()
		a.dirty.mark(func(c *changed) { c.nodes = true })
		select {
		case <-a.leave.applied:
			a.log.Info("leaving: peers take this node's addresses while it answers with their MACs", "for", a.cfg.LetGoWait)
			time.Sleep(a.cfg.LetGoWait)
		case <-time.After(leaveApplyWait):
			a.log.Warn("leaving: the decision loop did not hand the addresses over in time; stopping anyway", "waited", leaveApplyWait)
		}
	}()
	return out
}

// untilLeaving is ctx ending also when the agent begins to leave: the
// parts that must not outlive the signal.
func (a *Agent) untilLeaving(ctx context.Context) context.Context {
	out, cancel := context.WithCancel(ctx)
	go func() {
		defer cancel()
		select {
		case <-out.Done():
		case <-a.leave.begun:
		}
	}()
	return out
}
