package bgpagent

import (
	"testing"
	"time"
)

// TestSettleWait: short decisions wait the configured settle; a long one
// makes the pause nine times as long, so deciding takes at most a tenth
// of the time while changes keep coming.
func TestSettleWait(t *testing.T) {
	for _, c := range []struct {
		settle, took, want time.Duration
	}{
		{50 * time.Millisecond, 0, 50 * time.Millisecond},
		{50 * time.Millisecond, 2 * time.Millisecond, 50 * time.Millisecond},
		{50 * time.Millisecond, 5 * time.Millisecond, 50 * time.Millisecond},
		{50 * time.Millisecond, 6 * time.Millisecond, 54 * time.Millisecond},
		{50 * time.Millisecond, 27 * time.Millisecond, 243 * time.Millisecond},
		{50 * time.Millisecond, 300 * time.Millisecond, 2700 * time.Millisecond},
		{time.Second, 27 * time.Millisecond, time.Second},
	} {
		got := settleWait(c.settle, c.took)
		if got != c.want {
			t.Errorf("settleWait(%v, %v) = %v, want %v", c.settle, c.took, got, c.want)
		}
		if share := float64(c.took) / float64(c.took+got); share > 1.0/decideShare+1e-9 {
			t.Errorf("settleWait(%v, %v): deciding takes %.0f %% of the time, want at most %d %%", c.settle, c.took, 100*share, 100/decideShare)
		}
	}
}
