package failover

import (
	"slices"
	"time"
)

// Spread is the median and the worst of a figure over runs.
type Spread[T int | time.Duration] struct {
	Median, Worst T
	N             int
}

// Summarize computes the median (the mean of the middle two for an even
// count) and the worst (largest) of xs. The zero Spread for no values.
func Summarize[T int | time.Duration](xs []T) Spread[T] {
	if len(xs) == 0 {
		return Spread[T]{}
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	med := s[n/2]
	if n%2 == 0 {
		med = s[n/2-1] + (s[n/2]-s[n/2-1])/2
	}
	return Spread[T]{Median: med, Worst: s[n-1], N: n}
}

// Summary is what `mooring failover` reports over all runs.
type Summary struct {
	Runs        int
	Phase1      Spread[time.Duration]
	Phase2      Spread[time.Duration]
	ErrorsUntil Spread[time.Duration]
	// OwnerChange is Kill → the client seeing the new MAC, over the runs
	// where it was seen.
	OwnerChange Spread[time.Duration]
	// RouteWithdrawn is Kill → the killed node leaving the router's route,
	// over the routed runs where it was seen.
	RouteWithdrawn Spread[time.Duration]
	// Routed says some run was routed (phase 1 is the route withdrawal).
	Routed   bool
	Failed   Spread[int] // failed requests per run, from the kill on
	Requests Spread[int] // requests per run, from the kill on
	// Incomplete counts runs where a phase did not end within the run: their
	// durations are lower bounds, and are included as such.
	Incomplete int
	// ByClass totals failed requests per class over every run and phase.
	ByClass map[string]int
}

// SummarizeRuns folds the timelines of all runs into a Summary.
func SummarizeRuns(tls []Timeline) Summary {
	var p1, p2, eu, oc, rw []time.Duration
	var failed, reqs []int
	s := Summary{Runs: len(tls), ByClass: map[string]int{}}
	for _, t := range tls {
		p1 = append(p1, t.Phase1)
		p2 = append(p2, t.Phase2)
		eu = append(eu, t.ErrorsUntil)
		if !t.OwnerChange.IsZero() {
			oc = append(oc, t.OwnerChange.Sub(t.Kill))
		}
		if !t.RouteWithdrawn.IsZero() {
			rw = append(rw, t.RouteWithdrawn.Sub(t.Kill))
		}
		s.Routed = s.Routed || t.Routed
		failed = append(failed, t.Failed())
		n := 0
		for _, p := range []Phase{Phase1, Phase2, PhaseAfter} {
			if c := t.Counts[p]; c != nil {
				n += c.Requests
			}
		}
		reqs = append(reqs, n)
		if !t.Phase1Complete || !t.Phase2Complete {
			s.Incomplete++
		}
		for k, v := range t.Total().ByClass {
			s.ByClass[k] += v
		}
	}
	s.Phase1, s.Phase2, s.ErrorsUntil, s.OwnerChange = Summarize(p1), Summarize(p2), Summarize(eu), Summarize(oc)
	s.Failed, s.Requests, s.RouteWithdrawn = Summarize(failed), Summarize(reqs), Summarize(rw)
	return s
}
