package lab_test

import (
	"errors"
	"testing"
	"time"
)

// TestSplitRehashed: only a reset in flight across a next-hop change is
// the ECMP rehash; a reset with no change in its window, or another error
// across one, stays a failure.
func TestSplitRehashed(t *testing.T) {
	t0 := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	changes := []time.Time{t0.Add(20 * time.Second)} // the kernel's next hops changed
	reset := errors.New("read tcp: connection reset by peer")
	failed := []request{
		{start: t0.Add(19500 * time.Millisecond), err: reset},                           // across the change
		{start: t0.Add(5 * time.Second), err: reset},                                    // no change in its window
		{start: t0.Add(19 * time.Second), err: errors.New("context deadline exceeded")}, // not a reset
		{start: t0.Add(21 * time.Second), err: reset},                                   // after the change
	}
	rest, rehashed := splitRehashed(failed, changes)
	if len(rehashed) != 1 || !rehashed[0].start.Equal(failed[0].start) || len(rest) != 3 {
		t.Errorf("rehashed %v, rest %v: want only the first request rehashed", rehashed, rest)
	}
}
