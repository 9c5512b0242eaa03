package failover

import (
	"math/rand/v2"
	"reflect"
	"testing"
	"time"
)

var (
	okO      = Outcome{Class: ClassOK, Status: 200}
	ctO      = Outcome{Class: ClassConnectTimeout}
	rtO      = Outcome{Class: ClassResponseTimeout}
	http503O = StatusOutcome(503)
)

// ticks makes a request every 100 ms in [from, to) seconds with outcome f.
func ticks(from, to float64, f func(i int) Outcome) []Result {
	var rs []Result
	for i := 0; from+float64(i)*0.1 < to-1e-9; i++ {
		rs = append(rs, Result{Start: ts(from + float64(i)*0.1), Latency: time.Millisecond, Outcome: f(i)})
	}
	return rs
}

func always(o Outcome) func(int) Outcome { return func(int) Outcome { return o } }

func alternate(a, b Outcome) func(int) Outcome {
	return func(i int) Outcome {
		if i%2 == 0 {
			return a
		}
		return b
	}
}

func cat(parts ...[]Result) []Result {
	var out []Result
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func sec(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func TestComputeTimeline(t *testing.T) {
	type want struct {
		firstErr, recovered, lastErr, gone, owner float64 // -1: zero time
		phase1, phase2, errorsUntil               float64
		p1Complete, p2Complete                    bool
		p1Failed, p2Failed, before, after         int
	}
	tests := []struct {
		name string
		in   Observed
		want want
	}{
		{
			name: "hard kill: outage, then stale endpoint, then clean",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(8),
				Events: []Event{{Kind: EventKill, At: ts(1)}, {Kind: EventOwnerChange, At: ts(2.05)}, {Kind: EventEndpointsGone, At: ts(4.85)}},
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 2.1, always(ctO)),
					ticks(2.1, 5, alternate(okO, rtO)), ticks(5, 8, always(okO))),
			},
			want: want{firstErr: 1, recovered: 2.1, lastErr: 4.8, gone: 4.85, owner: 2.05,
				phase1: 1.1, phase2: 2.75, errorsUntil: 3.8, p1Complete: true, p2Complete: true,
				p1Failed: 11, p2Failed: 14, before: 0, after: 0},
		},
		{
			name: "endpoints leave after the errors stop: phase 2 runs to them",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(8),
				Events:  []Event{{Kind: EventEndpointsGone, At: ts(6)}},
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 1.5, always(ctO)), ticks(1.5, 8, always(okO))),
			},
			want: want{firstErr: 1, recovered: 1.5, lastErr: 1.4, gone: 6, owner: -1,
				phase1: 0.5, phase2: 4.5, errorsUntil: 0.4, p1Complete: true, p2Complete: true, p1Failed: 5},
		},
		{
			name: "soft failover, no error at all",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(3), EndpointsStay: true,
				Events:  []Event{{Kind: EventOwnerChange, At: ts(1.3)}},
				Results: ticks(0, 3, always(okO)),
			},
			want: want{firstErr: -1, recovered: 1, lastErr: -1, gone: -1, owner: 1.3,
				p1Complete: true, p2Complete: true},
		},
		{
			name: "a 503 is an answer: phase 1 ends, its error counts in phase 2",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(4),
				Events:  []Event{{Kind: EventEndpointsGone, At: ts(2.5)}},
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 1.5, always(ctO)), ticks(1.5, 2, always(http503O)), ticks(2, 4, always(okO))),
			},
			want: want{firstErr: 1, recovered: 1.5, lastErr: 1.9, gone: 2.5, owner: -1,
				phase1: 0.5, phase2: 1, errorsUntil: 0.9, p1Complete: true, p2Complete: true, p1Failed: 5, p2Failed: 5},
		},
		{
			name: "only 503s: the address never went silent, no phase 1",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(4),
				Events:  []Event{{Kind: EventEndpointsGone, At: ts(2)}},
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 1.5, always(http503O)), ticks(1.5, 4, always(okO))),
			},
			want: want{firstErr: 1, recovered: 1, lastErr: 1.4, gone: 2, owner: -1,
				phase1: 0, phase2: 1, errorsUntil: 0.4, p1Complete: true, p2Complete: true, p1Failed: 0, p2Failed: 5},
		},
		{
			name: "a 503 first, then silence: phase 1 runs to the answer after the silence",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(4),
				Events:  []Event{{Kind: EventEndpointsGone, At: ts(2)}},
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 1.1, always(http503O)), ticks(1.1, 1.5, always(ctO)), ticks(1.5, 4, always(okO))),
			},
			want: want{firstErr: 1, recovered: 1.5, lastErr: 1.4, gone: 2, owner: -1,
				phase1: 0.5, phase2: 0.5, errorsUntil: 0.4, p1Complete: true, p2Complete: true, p1Failed: 5},
		},
		{
			name: "never answers again: phase 1 is a lower bound to the end",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(4),
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 4, always(ctO))),
			},
			want: want{firstErr: 1, recovered: -1, lastErr: 3.9, gone: -1, owner: -1,
				phase1: 3, errorsUntil: 2.9, p1Failed: 30},
		},
		{
			name: "endpoints never leave: phase 2 is a lower bound to the end",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(4),
				Results: cat(ticks(0, 1, always(okO)), ticks(1, 2, always(ctO)), ticks(2, 4, alternate(okO, http503O))),
			},
			want: want{firstErr: 1, recovered: 2, lastErr: 3.9, gone: -1, owner: -1,
				phase1: 1, phase2: 2, errorsUntil: 2.9, p1Complete: true, p1Failed: 10, p2Failed: 10},
		},
		{
			name: "a request in flight at the kill that fails is the kill's doing",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(3),
				Events: []Event{{Kind: EventEndpointsGone, At: ts(1.5)}},
				Results: cat(ticks(0, 0.9, always(okO)),
					[]Result{{Start: ts(0.95), Latency: sec(0.2), Outcome: rtO}},
					ticks(1, 1.2, always(ctO)), ticks(1.2, 3, always(okO))),
			},
			want: want{firstErr: 1, recovered: 1.2, lastErr: 1.1, gone: 1.5, owner: -1,
				phase1: 0.2, phase2: 0.3, errorsUntil: 0.1, p1Complete: true, p2Complete: true, p1Failed: 3},
		},
		{
			name: "errors before the kill stay before, events before it are ignored",
			in: Observed{
				Start: ts(0), Kill: ts(1), End: ts(3),
				Events:  []Event{{Kind: EventOwnerChange, At: ts(0.5)}, {Kind: EventEndpointsGone, At: ts(1)}},
				Results: cat(ticks(0, 0.5, always(okO)), []Result{{Start: ts(0.55), Latency: time.Millisecond, Outcome: ctO}}, ticks(0.6, 3, always(okO))),
			},
			want: want{firstErr: -1, recovered: 1, lastErr: -1, gone: 1, owner: -1,
				p1Complete: true, p2Complete: true, before: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := ComputeTimeline(tt.in)
			w := tt.want
			checkAt := func(name string, got time.Time, want float64) {
				t.Helper()
				if want < 0 {
					if !got.IsZero() {
						t.Errorf("%s = %s, want none", name, got.Sub(t0))
					}
					return
				}
				if d := got.Sub(ts(want)); d > time.Millisecond || d < -time.Millisecond {
					t.Errorf("%s = %v, want %v s", name, got.Sub(t0), want)
				}
			}
			checkDur := func(name string, got time.Duration, want float64) {
				t.Helper()
				if d := got - sec(want); d > time.Millisecond || d < -time.Millisecond {
					t.Errorf("%s = %s, want %v s", name, got, want)
				}
			}
			checkAt("FirstError", tl.FirstError, w.firstErr)
			checkAt("Recovered", tl.Recovered, w.recovered)
			checkAt("LastError", tl.LastError, w.lastErr)
			checkAt("EndpointsGone", tl.EndpointsGone, w.gone)
			checkAt("OwnerChange", tl.OwnerChange, w.owner)
			checkDur("Phase1", tl.Phase1, w.phase1)
			checkDur("Phase2", tl.Phase2, w.phase2)
			checkDur("ErrorsUntil", tl.ErrorsUntil, w.errorsUntil)
			if tl.Phase1Complete != w.p1Complete || tl.Phase2Complete != w.p2Complete {
				t.Errorf("complete = %v/%v, want %v/%v", tl.Phase1Complete, tl.Phase2Complete, w.p1Complete, w.p2Complete)
			}
			got := []int{tl.Counts[Phase1].Failed, tl.Counts[Phase2].Failed, tl.Counts[PhaseBefore].Failed, tl.Counts[PhaseAfter].Failed}
			if exp := []int{w.p1Failed, w.p2Failed, w.before, w.after}; !reflect.DeepEqual(got, exp) {
				t.Errorf("failed per phase (1, 2, before, after) = %v, want %v", got, exp)
			}
			if tot := tl.Total().Requests; tot != len(tt.in.Results) {
				t.Errorf("counted %d requests, have %d", tot, len(tt.in.Results))
			}
		})
	}
}

func TestComputeTimelineByClass(t *testing.T) {
	tl := ComputeTimeline(Observed{
		Start: ts(0), Kill: ts(1), End: ts(5),
		Events:  []Event{{Kind: EventEndpointsGone, At: ts(3)}},
		Results: cat(ticks(0, 1, always(okO)), ticks(1, 1.5, always(ctO)), ticks(1.5, 2, always(Outcome{Class: ClassRefused})), ticks(2, 3, alternate(okO, http503O)), ticks(3, 5, always(okO))),
	})
	if got, want := tl.Counts[Phase1].ByClass, map[string]int{"connect-timeout": 5, "refused": 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("phase 1 = %v, want %v", got, want)
	}
	if got, want := tl.Counts[Phase2].ByClass, map[string]int{"http-503": 5}; !reflect.DeepEqual(got, want) {
		t.Errorf("phase 2 = %v, want %v", got, want)
	}
	if _, ok := tl.Total().ByClass["ok"]; ok {
		t.Error("successes must not be counted as a class")
	}
}

// The order results and events arrive in must not matter.
func TestComputeTimelineOrderFree(t *testing.T) {
	in := Observed{
		Start: ts(0), Kill: ts(1), End: ts(8),
		Events: []Event{{Kind: EventKill, At: ts(1)}, {Kind: EventOwnerChange, At: ts(2.05)}, {Kind: EventEndpointsGone, At: ts(4.85)},
			{Kind: EventOwnerChange, At: ts(6)}},
		Results: cat(ticks(0, 1, always(okO)), ticks(1, 2.1, always(ctO)), ticks(2.1, 5, alternate(okO, rtO)), ticks(5, 8, always(okO))),
	}
	ref := ComputeTimeline(in)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 50; i++ {
		shuffled := in
		shuffled.Results = append([]Result(nil), in.Results...)
		shuffled.Events = append([]Event(nil), in.Events...)
		rng.Shuffle(len(shuffled.Results), func(a, b int) { shuffled.Results[a], shuffled.Results[b] = shuffled.Results[b], shuffled.Results[a] })
		rng.Shuffle(len(shuffled.Events), func(a, b int) { shuffled.Events[a], shuffled.Events[b] = shuffled.Events[b], shuffled.Events[a] })
		if got := ComputeTimeline(shuffled); !reflect.DeepEqual(got, ref) {
			t.Fatalf("permutation %d changed the timeline:\n got %+v\nwant %+v", i, got, ref)
		}
	}
}
