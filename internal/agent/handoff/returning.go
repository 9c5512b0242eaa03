package handoff

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/mooringlb/mooring/internal/membership"
)

// Config are the hand-off's waits (agent flags and defaults).
type Config struct {
	// Node is this node's name.
	Node string
	// HoldDown is how long a node that comes back to a cluster serving
	// without it waits before it is a candidate again (0: at once).
	HoldDown time.Duration
	// TakeDelay is the least a returning node waits after publishing its
	// readiness before it takes its addresses; it then waits until every
	// ready peer confirms that it let them go. TakeMaxWait ends the wait
	// for older peers that cannot confirm, and is when a lagging peer is
	// logged and counted (the node waits on for it).
	TakeDelay, TakeMaxWait time.Duration
}

// Returning is the state of this node as a returning one: whether it is
// coming back to a cluster that served without it (a restart, the end of
// an exclusion, a stall longer than its peers wait), its hold-down and its
// take. The decision loop owns it: no method is safe for concurrent use.
// Methods never schedule anything themselves: each returns the waits
// after which the caller must decide again.
type Returning struct {
	cfg  Config
	log  *slog.Logger
	born time.Time // wall clock at New: peers' Since is compared with it

	started   bool      // the first decision has run
	returning bool      // a peer was ready since before this node started, or it came back
	excluded  bool      // this Node has the exclude-from-external-load-balancers label
	readyAt   time.Time // the end of the hold-down, by the agent's clock (zero: none)
	sinceMs   int64     // wall clock (Unix ms) when first ready: published as ReadyAt, and in seconds as Since
	takeAt    time.Time // when this node may take addresses at the earliest
	takeBy    time.Time // TakeMaxWait: older peers no longer awaited, a lagging one logged
	taking    bool      // returning, ready, waiting for its peers to confirm
	overdue   bool      // the maximum wait passed with a peer unconfirmed (logged, counted)
	took      bool      // a take ended since Took was last called

	unconfirmed, unconfirmable prometheus.Counter
}

// NewReturning starts the state of a node born now (wall clock).
func NewReturning(cfg Config, born time.Time, log *slog.Logger, reg prometheus.Registerer) *Returning {
	f := promauto.With(reg)
	return &Returning{cfg: cfg, log: log, born: born,
		unconfirmed: f.NewCounter(prometheus.CounterOpts{Name: "mooring_agent_take_unconfirmed_total",
			Help: "Times the maximum wait of this returning agent's take passed with a ready peer that confirms takes not yet confirming it had let the addresses go: " +
				"the agent keeps waiting and answers nothing beside that peer until it confirms, stops serving, or leaves the gossip members (found dead)."}),
		unconfirmable: f.NewCounter(prometheus.CounterOpts{Name: "mooring_agent_take_unconfirmable_total",
			Help: "Times this returning agent took its addresses after the maximum wait because a peer publishes no confirmations at all (an older agent, which lets addresses go as soon as it counts a member)."}),
	}
}

// Born is the wall-clock time the agent started.
func (r *Returning) Born() time.Time { return r.born }

// Started reports whether the first decision has run.
func (r *Returning) Started() bool { return r.started }

// Exclude notes this node's exclusion (the Node's
// exclude-from-external-load-balancers label) at now and, when it ends,
// starts the hold-down; it returns the wait after which to decide again
// (0: none).
func (r *Returning) Exclude(now time.Time, excluded bool) time.Duration {
	switch {
	case excluded && !r.excluded:
		r.excluded = true
		r.log.Info("this Node is excluded from external load balancers: letting its addresses go", "label", "node.kubernetes.io/exclude-from-external-load-balancers")
	case !excluded && r.excluded:
		r.excluded = false
		if !r.started {
			return 0 // the first decision: Hold decides
		}
		r.comeBack(now)
		r.log.Info("this Node is no longer excluded: holding back before taking addresses", "for", r.cfg.HoldDown)
		return r.cfg.HoldDown
	}
	return 0
}

// Resume makes this node a returning one after a stall longer than its
// peers wait (see Stall): its decision is stale. It returns the wait after
// which to decide again (0 before the first decision: Hold decides).
func (r *Returning) Resume(now time.Time) time.Duration {
	if !r.started {
		return 0
	}
	r.comeBack(now)
	r.takeAt = time.Time{}
	return r.cfg.HoldDown
}

// comeBack starts a hold-down at now.
func (r *Returning) comeBack(now time.Time) {
	r.returning = true
	r.sinceMs = 0
	r.readyAt = now.Add(r.cfg.HoldDown)
}

// Hold decides, at now (the agent's clock) and wall (the wall clock), with
// the gossip members and the metadata this node is about to publish,
// whether it is held back: at the first decision it finds out whether it
// is coming back to a cluster that has been serving without it (a peer
// ready since before it started): then it stays no candidate for
// HoldDown, so the node's own data path settles before it pulls addresses
// back, and a flapping node does not pull them back and forth. At a cold
// start (no peer ready before it) it serves at once. Hold sets meta's
// readiness, Since and Taking, and returns whether the node is held back
// now and the waits after which to decide again.
func (r *Returning) Hold(now, wall time.Time, members []membership.Member, meta *membership.NodeMeta) (bool, []time.Duration) {
	var wake []time.Duration
	if !r.started {
		r.started = true
		if peer, ok := r.servedWithout(wall, members); ok {
			r.returning = true
			r.readyAt = now.Add(r.cfg.HoldDown)
			r.log.Info("peers have served without this node: holding back before taking addresses", "for", r.cfg.HoldDown, "peer", peer)
			wake = append(wake, r.cfg.HoldDown)
		}
	}
	meta.Born = r.born.UnixMilli()
	if now.Before(r.readyAt) {
		meta.Ready = false
		meta.Reason = fmt.Sprintf("holding down for %s after start: the cluster served without this node", r.cfg.HoldDown)
		return true, wake
	}
	if meta.Ready && r.sinceMs == 0 {
		r.sinceMs = wall.UnixMilli()
		wake = append(wake, r.startTake(now)...)
	}
	meta.Since, meta.ReadyAt = r.sinceMs/1000, r.sinceMs
	if r.taking && r.take(now, members) == takeWait {
		meta.Taking = true
		return true, wake
	}
	return false, wake
}

// servedWithout returns a ready peer that has served without this node:
// one ready since before it started (ServedBefore), or, when this agent
// starts late (ColdStartWindow less the slack passed before its first
// decision, as its peers count a starting peer no longer), any ready peer.
// Its peers judge the same from what it publishes (StartingCandidate), so
// a node that holds down is never one its peers let its addresses go to.
func (r *Returning) servedWithout(wall time.Time, members []membership.Member) (string, bool) {
	if peer, ok := ServedBefore(r.cfg.Node, r.born.UnixMilli(), members); ok {
		return peer, true
	}
	if wall.Sub(r.born) >= ColdStartWindow-coldStartSlack {
		return ServedBefore(r.cfg.Node, math.MaxInt64, members)
	}
	return "", false
}

// startTake begins a returning node's take at now, when it publishes its
// readiness (with Taking): it takes its addresses once every ready peer
// has confirmed, in its own metadata published after its responder applied
// the decision, that it counts this node: it has let them go. Taking them
// first would leave a peer answering beside it, and were this node to die
// before its readiness spread, that peer would never re-announce them (it
// never saw them move). TakeDelay is the least wait. TakeMaxWait ends the
// wait only for peers that cannot confirm (older agents, which let go as
// soon as they count a member): a peer that confirms takes but has not is
// still answering for the addresses (slow gossip, a stuck decision loop),
// so the node waits on, never beside it, until it confirms, stops serving
// or leaves the members (gossip and the kernel check found it dead); the
// maximum wait passing then logs a warning and counts
// mooring_agent_take_unconfirmed_total. At a cold start peers count it
// already, so it takes them at once.
func (r *Returning) startTake(now time.Time) []time.Duration {
	if !r.returning {
		return nil
	}
	r.taking, r.overdue = true, false
	r.takeAt = now.Add(r.cfg.TakeDelay)
	r.takeBy = now.Add(max(r.cfg.TakeMaxWait, r.cfg.TakeDelay))
	return []time.Duration{r.cfg.TakeDelay, r.takeBy.Sub(now)}
}

// take decides the take at now and ends it unless it must wait.
func (r *Returning) take(now time.Time, members []membership.Member) int {
	awaited, older := Unconfirmed(r.cfg.Node, members)
	d := takeDecision(now, r.takeAt, r.takeBy, awaited, older)
	switch d {
	case takeWait:
		if len(awaited) > 0 && !now.Before(r.takeBy) && !r.overdue {
			r.overdue = true
			r.unconfirmed.Inc()
			r.log.Warn("the maximum wait passed without every peer's confirmation: still waiting, never answering beside a peer that has not let the addresses go",
				"waited", max(r.cfg.TakeMaxWait, r.cfg.TakeDelay), "unconfirmed", awaited)
		}
		return d
	case takeConfirmed:
		r.log.Info("every ready peer has let this node's addresses go: taking them", "after", now.Sub(r.takeAt)+r.cfg.TakeDelay, "overdue", r.overdue)
	case takeUnconfirmed:
		r.unconfirmable.Inc()
		r.log.Warn("taking addresses after the maximum wait: some peers publish no confirmations (older agents)",
			"waited", max(r.cfg.TakeMaxWait, r.cfg.TakeDelay), "older", older)
	}
	r.taking, r.took = false, true
	return d
}

// Took reports, once, that a take ended since the last call, and the
// readiness (Since) it was for: the caller tells the peers that kept
// answering for the addresses (membership.Took) after the responder took
// them.
func (r *Returning) Took() (int64, bool) {
	if !r.took {
		return 0, false
	}
	r.took = false
	return r.sinceMs / 1000, true
}

// What a returning node does about its addresses (takeDecision).
const (
	takeWait = iota
	takeConfirmed
	takeUnconfirmed
)

// takeDecision: a returning node waits at least until takeAt, then until
// no peer is awaited (however long), and for peers that cannot confirm
// (older) until takeBy.
func takeDecision(now, takeAt, takeBy time.Time, awaited, older []string) int {
	switch {
	case now.Before(takeAt), len(awaited) > 0:
		return takeWait
	case len(older) == 0:
		return takeConfirmed
	case now.Before(takeBy):
		return takeWait
	}
	return takeUnconfirmed
}

// Unconfirmed returns the live peers that serve (ready, not leaving) but
// have not confirmed that they count self: awaited are those that can
// (they publish confirmations, or their metadata cannot be read: perhaps
// a newer agent's), older those that never will (no metadata, or metadata
// without confirmations: older agents).
func Unconfirmed(self string, members []membership.Member) (awaited, older []string) {
	for _, m := range members {
		switch {
		case m.Name == self:
		case m.MetaErr != nil && !errors.Is(m.MetaErr, membership.ErrNoMeta):
			awaited = append(awaited, m.Name)
		case errors.Is(m.MetaErr, membership.ErrNoMeta):
			if !m.Meta.Leaving {
				older = append(older, m.Name) // an older agent: a candidate for everything
			}
		case !m.Meta.Ready || m.Meta.Leaving:
			// Serves nothing: not a candidate in anyone's ranking.
		case !m.Meta.Confirms:
			older = append(older, m.Name)
		case !m.Meta.Counts(self):
			awaited = append(awaited, m.Name)
		}
	}
	return awaited, older
}
