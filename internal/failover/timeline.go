package failover

import (
	"slices"
	"time"
)

// EventKind names something the runner saw happen (as opposed to request
// results, from which the rest of the timeline is computed).
type EventKind string

// The observed events.
const (
	// EventKill: the Killer was called for the announcing node.
	EventKill EventKind = "kill"
	// EventOwnerChange: the MAC the client sees for the address changed
	// from the dead node's to another.
	EventOwnerChange EventKind = "owner-change"
	// EventEndpointsGone: none of the dead node's endpoints is ready in the
	// Service's EndpointSlices any more (ready=false or removed).
	EventEndpointsGone EventKind = "endpoints-gone"
)

// Event is one observation, stamped by the injected clock.
type Event struct {
	Kind   EventKind
	At     time.Time
	Detail string // e.g. "aa:bb:.. (node-b) -> cc:dd:.. (node-c)"
}

// Phase is where in a run a request falls.
type Phase string

// The phases of a run.
const (
	PhaseBefore Phase = "before" // before the kill: should be clean
	Phase1      Phase = "phase1" // kill → address answers again
	Phase2      Phase = "phase2" // → dead endpoints gone and errors stopped
	PhaseAfter  Phase = "after"  // the quiet tail the runner waits out
)

// Phases lists the phases in order.
var Phases = []Phase{PhaseBefore, Phase1, Phase2, PhaseAfter}

// Counts are the requests of one phase.
type Counts struct {
	Requests int
	Failed   int
	ByClass  map[string]int // Outcome.Key → failed requests; never "ok"
}

func (c *Counts) add(o Outcome) {
	c.Requests++
	if o.OK() {
		return
	}
	c.Failed++
	if c.ByClass == nil {
		c.ByClass = map[string]int{}
	}
	c.ByClass[o.Key()]++
}

// Timeline is one run, computed by ComputeTimeline. Zero times mean "did not
// happen within the run".
type Timeline struct {
	Start, Kill, End time.Time

	FirstError  time.Time // first failure at or after the kill
	OwnerChange time.Time // first owner change at or after the kill
	// Recovered is the first answer (Outcome.Answered) after the address
	// went silent; the kill itself when it never did.
	Recovered     time.Time
	LastError     time.Time // last failure at or after the kill
	EndpointsGone time.Time // the dead node's endpoints left the EndpointSlices

	// Phase1 is Kill → Recovered (0 when the address never went silent). Phase2 is
	// Recovered → the later of LastError and EndpointsGone. ErrorsUntil is
	// Kill → LastError, what seed 002 called "errors until".
	Phase1, Phase2, ErrorsUntil time.Duration
	// Phase1Complete is false when the address never answered again within
	// the run; Phase2Complete is false when the dead node's endpoints never
	// left (Phase1/Phase2 then run to End and are lower bounds).
	Phase1Complete, Phase2Complete bool
	// EndpointsStay is Observed.EndpointsStay: a soft failover.
	EndpointsStay bool
	// Routed is Observed.Routed; RouteWithdrawn is when the killed node
	// left the router's route for the address (routes.go).
	Routed         bool
	RouteWithdrawn time.Time

	Counts map[Phase]*Counts
	Events []Event
}

// Total sums the counts of every phase.
func (t Timeline) Total() Counts {
	var sum Counts
	for _, p := range Phases {
		c := t.Counts[p]
		if c == nil {
			continue
		}
		sum.Requests += c.Requests
		sum.Failed += c.Failed
		for k, n := range c.ByClass {
			if sum.ByClass == nil {
				sum.ByClass = map[string]int{}
			}
			sum.ByClass[k] += n
		}
	}
	return sum
}

// Failed counts the failed requests from the kill on.
func (t Timeline) Failed() int {
	n := 0
	for _, p := range []Phase{Phase1, Phase2, PhaseAfter} {
		if c := t.Counts[p]; c != nil {
			n += c.Failed
		}
	}
	return n
}

// Observed is what a run saw: the input of ComputeTimeline.
type Observed struct {
	// Start is when requests began, Kill when the Killer was called, End
	// when the run stopped observing.
	Start, Kill, End time.Time
	Events           []Event
	Results          []Result // in any order
	// EndpointsStay says the dead node's endpoints are not expected to leave
	// (a soft failover: the node and its backends stay up). Phase 2 then
	// ends with the last error and is complete without EventEndpointsGone.
	EndpointsStay bool
	// Routed says the client reaches the address through a router's ECMP
	// route (routes.go): phase 1 ends with the route withdrawal.
	Routed bool
}

// ComputeTimeline turns what a run observed into its timeline.
//
// A request is placed by its start, with one exception: a request started
// before the kill that failed after it is placed at the kill — the kill is
// what broke it.
func ComputeTimeline(in Observed) Timeline {
	start, kill, end, events, results := in.Start, in.Kill, in.End, in.Events, in.Results
	tl := Timeline{Start: start, Kill: kill, End: end, EndpointsStay: in.EndpointsStay, Routed: in.Routed, Counts: map[Phase]*Counts{}}
	for _, p := range Phases {
		tl.Counts[p] = &Counts{}
	}
	tl.Events = slices.Clone(events)
	slices.SortStableFunc(tl.Events, func(a, b Event) int { return a.At.Compare(b.At) })
	for _, e := range tl.Events {
		if e.At.Before(kill) {
			continue
		}
		switch {
		case e.Kind == EventOwnerChange && tl.OwnerChange.IsZero():
			tl.OwnerChange = e.At
		case e.Kind == EventEndpointsGone && tl.EndpointsGone.IsZero():
			tl.EndpointsGone = e.At
		case e.Kind == EventRouteWithdrawn && tl.RouteWithdrawn.IsZero():
			tl.RouteWithdrawn = e.At
		}
	}

	rs := make([]placed, 0, len(results))
	for _, r := range results {
		at := r.Start
		if at.Before(kill) && !r.Outcome.OK() && !r.End().Before(kill) {
			at = kill
		}
		rs = append(rs, placed{at, r.Outcome})
	}
	slices.SortStableFunc(rs, func(a, b placed) int { return a.at.Compare(b.at) })

	var silent time.Time // the first request the address did not answer
	for _, r := range rs {
		if r.at.Before(kill) {
			continue
		}
		switch {
		case !r.o.Answered() && silent.IsZero():
			silent = r.at
		case r.o.Answered() && !silent.IsZero() && tl.Recovered.IsZero():
			tl.Recovered = r.at
		}
		if !r.o.OK() {
			if tl.FirstError.IsZero() {
				tl.FirstError = r.at
			}
			tl.LastError = r.at
		}
	}

	tl.setPhase1(rs, silent, end)
	if !tl.LastError.IsZero() {
		tl.ErrorsUntil = tl.LastError.Sub(kill)
	}

	phase2End := tl.Recovered
	if tl.Phase1Complete {
		phase2End = latest(tl.Recovered, tl.LastError, tl.EndpointsGone)
		tl.Phase2Complete = in.EndpointsStay || !tl.EndpointsGone.IsZero()
		if !tl.Phase2Complete {
			phase2End = end
		}
		tl.Phase2 = max(0, phase2End.Sub(tl.Recovered))
	}

	for _, r := range rs {
		p := PhaseAfter
		switch {
		case r.at.Before(kill):
			p = PhaseBefore
		case !tl.Phase1Complete || r.at.Before(tl.Recovered):
			p = Phase1
		case !r.at.After(phase2End):
			p = Phase2
		}
		tl.Counts[p].add(r.o)
	}
	return tl
}

// setPhase1 sets Recovered, Phase1 and Phase1Complete from the requests
// in time order and the first unanswered one after the kill (silent).
func (tl *Timeline) setPhase1(rs []placed, silent, end time.Time) {
	kill := tl.Kill
	switch {
	case tl.Routed:
		tl.Recovered, tl.Phase1Complete = routedRecovery(rs, kill, tl.RouteWithdrawn)
		tl.Phase1 = end.Sub(kill)
		if tl.Phase1Complete {
			tl.Phase1 = tl.Recovered.Sub(kill)
		}
	case silent.IsZero(): // the address never went silent (a clean soft failover, or only 503s)
		tl.Recovered, tl.Phase1Complete = kill, true
	case !tl.Recovered.IsZero():
		tl.Phase1, tl.Phase1Complete = tl.Recovered.Sub(kill), true
	default:
		tl.Phase1 = end.Sub(kill)
	}
}

// placed is a request's outcome at the time it counts from (see
// ComputeTimeline).
type placed struct {
	at time.Time
	o  Outcome
}

func latest(ts ...time.Time) time.Time {
	var m time.Time
	for _, t := range ts {
		if t.After(m) {
			m = t
		}
	}
	return m
}
