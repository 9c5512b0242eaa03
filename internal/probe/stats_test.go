package probe

import (
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	var ss []Sample
	for i := 1; i <= 100; i++ {
		ss = append(ss, Sample{Delay: time.Duration(i) * time.Millisecond})
	}
	s := Summarize(ss, time.Second)
	if s.P50 != 50*time.Millisecond || s.P99 != 99*time.Millisecond || s.Max != 100*time.Millisecond || !s.Healthy() {
		t.Fatalf("%+v", s)
	}
	ss = append(ss, Sample{Delay: 20 * time.Second}, Sample{Delay: 30 * time.Second, Failed: true})
	s = Summarize(ss, time.Second)
	if s.Max != 30*time.Second || s.Slow != 2 || s.Failed != 1 || s.Healthy() {
		t.Fatalf("%+v", s)
	}
	if Summarize(nil, time.Second).Healthy() {
		t.Fatal("no samples must not pass")
	}
	one := Summarize([]Sample{{Delay: 7 * time.Millisecond}}, time.Second)
	if one.P50 != 7*time.Millisecond || one.P99 != 7*time.Millisecond {
		t.Fatalf("%+v", one)
	}
}
