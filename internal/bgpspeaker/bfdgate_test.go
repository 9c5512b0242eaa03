package bgpspeaker

import (
	"testing"
	"time"
)

// TestBFDGate: a peer's BFD runs from a second after its BGP session is
// Established, and from ten seconds after BGP went down (or the peer was
// added) without coming up — for a router that lets BGP up only once BFD
// is (strict mode); BFD turned on that way stays on when BGP then comes up.
func TestBFDGate(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 0, 0, 0, 0, time.UTC)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	var zero time.Time
	for _, tc := range []struct {
		name              string
		established, down time.Time
		on                bool
		now               time.Time
		run               bool
		again             time.Duration
	}{
		{"just Established: off, look again in a second", t0, zero, false, t0, false, time.Second},
		{"Established 0.4 s: off for 0.6 s more", t0, zero, false, at(400 * time.Millisecond), false, 600 * time.Millisecond},
		{"Established 1 s: on", t0, zero, false, at(time.Second), true, 0},
		{"Established long since: on", t0, zero, false, at(time.Hour), true, 0},
		{"on before BGP came up (strict router): stays on", t0, zero, true, t0, true, 0},
		{"just down (or added): off for 10 s", zero, t0, false, t0, false, 10 * time.Second},
		{"down, on from before: off", zero, t0, true, at(time.Second), false, 9 * time.Second},
		{"down 10 s without BGP: on", zero, t0, false, at(10 * time.Second), true, 0},
		{"down a minute: on", zero, t0, true, at(time.Minute), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, again := bfdGate(tc.established, tc.down, tc.on, tc.now)
			if run != tc.run || again != tc.again {
				t.Errorf("bfdGate = %v, %s; want %v, %s", run, again, tc.run, tc.again)
			}
		})
	}
}
