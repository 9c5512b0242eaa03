package handoff

import "testing"

func TestZeroThresholdNeverStalls(t *testing.T) {
	w := NewStall(0, nil, nil)
	w.start()
	if w.beat() || w.Pending() {
		t.Fatal("a zero threshold noticed a stall")
	}
}
