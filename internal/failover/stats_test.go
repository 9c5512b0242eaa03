package failover

import (
	"reflect"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	tests := []struct {
		in   []time.Duration
		want Spread[time.Duration]
	}{
		{nil, Spread[time.Duration]{}},
		{[]time.Duration{sec(3)}, Spread[time.Duration]{Median: sec(3), Worst: sec(3), N: 1}},
		{[]time.Duration{sec(22.2), sec(17.8), sec(18.9)}, Spread[time.Duration]{Median: sec(18.9), Worst: sec(22.2), N: 3}},
		{[]time.Duration{sec(4), sec(1), sec(3), sec(2)}, Spread[time.Duration]{Median: sec(2.5), Worst: sec(4), N: 4}},
	}
	for _, tt := range tests {
		if got := Summarize(tt.in); got != tt.want {
			t.Errorf("Summarize(%v) = %+v, want %+v", tt.in, got, tt.want)
		}
	}
	if got := Summarize([]int{48, 88, 71}); got != (Spread[int]{Median: 71, Worst: 88, N: 3}) {
		t.Errorf("ints: %+v", got)
	}
	in := []int{3, 1, 2}
	Summarize(in)
	if !reflect.DeepEqual(in, []int{3, 1, 2}) {
		t.Error("Summarize must not reorder its input")
	}
}

func TestSummarizeRuns(t *testing.T) {
	mk := func(p1End, lastErr, gone float64) Timeline {
		return ComputeTimeline(Observed{
			Start: ts(0), Kill: ts(1), End: ts(10),
			Events:  []Event{{Kind: EventEndpointsGone, At: ts(gone)}, {Kind: EventOwnerChange, At: ts(p1End - 0.05)}},
			Results: cat(ticks(0, 1, always(okO)), ticks(1, p1End, always(ctO)), ticks(p1End, lastErr+0.1, alternate(okO, http503O)), ticks(lastErr+0.1, 10, always(okO))),
		})
	}
	runs := []Timeline{mk(2, 5, 5), mk(3, 7, 7.5), mk(2.5, 6, 6)}
	s := SummarizeRuns(runs)
	if s.Runs != 3 || s.Incomplete != 0 {
		t.Errorf("runs %d incomplete %d", s.Runs, s.Incomplete)
	}
	if s.Phase1.Median != sec(1.5) || s.Phase1.Worst != sec(2) {
		t.Errorf("phase 1 %+v", s.Phase1)
	}
	if s.Phase2.Median != sec(3.5) || s.Phase2.Worst != sec(4.5) {
		t.Errorf("phase 2 %+v", s.Phase2)
	}
	if s.OwnerChange.N != 3 || s.OwnerChange.Median != sec(1.45) {
		t.Errorf("owner change %+v", s.OwnerChange)
	}
	total := 0
	for _, r := range runs {
		total += r.Failed()
	}
	if got := s.ByClass["connect-timeout"] + s.ByClass["http-503"]; got != total {
		t.Errorf("by class %v sums to %d, want %d", s.ByClass, got, total)
	}
	if s.Failed.Worst != runs[1].Failed() {
		t.Errorf("worst failed %d, want %d", s.Failed.Worst, runs[1].Failed())
	}
	incomplete := ComputeTimeline(Observed{Start: ts(0), Kill: ts(1), End: ts(3), Results: ticks(1, 3, always(ctO))})
	if s := SummarizeRuns([]Timeline{incomplete}); s.Incomplete != 1 {
		t.Errorf("incomplete = %d", s.Incomplete)
	}
}
