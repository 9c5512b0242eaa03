package fsm

import (
	"errors"
	"testing"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bfd"
)

var fast = Config{DesiredMinTx: 300 * time.Millisecond, RequiredMinRx: 300 * time.Millisecond, DetectMult: 3}

var t0 = time.Date(2026, 12, 4, 0, 0, 0, 0, time.UTC)

func pkt(st bfd.StateType, my, your uint32) *bfd.BFDHeader {
	return &bfd.BFDHeader{Version: 1, State: st, DetectTimeMultiplier: 3, MyDiscriminator: my, YourDiscriminator: your,
		DesiredMinTxInterval: 300_000, RequiredMinRxInterval: 300_000}
}

// up brings s (local 1) Up with a remote whose discriminator is 7.
func up(t *testing.T) *Session {
	t.Helper()
	s := NewSession(fast, 1)
	for _, h := range []*bfd.BFDHeader{pkt(bfd.StateDown, 7, 0), pkt(bfd.StateUp, 7, 1)} {
		if _, err := s.Receive(t0, h); err != nil {
			t.Fatal(err)
		}
	}
	if s.State() != bfd.StateUp {
		t.Fatalf("state %v, want Up", s.State())
	}
	return s
}

// TestReceive walks RFC 5880 §6.8.6's transitions, the discard rules, and
// the rules of ours (a remote's new session is no failure; a Down the
// remote signals is held, TestHeldDown).
func TestReceive(t *testing.T) {
	bad := func(f func(*bfd.BFDHeader)) *bfd.BFDHeader { h := pkt(bfd.StateUp, 7, 1); f(h); return h }
	for _, tc := range []struct {
		name    string
		from    func(t *testing.T) *Session
		in      *bfd.BFDHeader
		want    bfd.StateType
		failure bool
		err     error
	}{
		{"Down hears Down: Init", func(*testing.T) *Session { return NewSession(fast, 1) }, pkt(bfd.StateDown, 7, 0), bfd.StateInit, false, nil},
		{"Down hears Init: Up", func(*testing.T) *Session { return NewSession(fast, 1) }, pkt(bfd.StateInit, 7, 1), bfd.StateUp, false, nil},
		{"Down hears Up: stays Down", func(*testing.T) *Session { return NewSession(fast, 1) }, pkt(bfd.StateUp, 7, 1), bfd.StateDown, false, nil},
		{"Up hears Up", up, pkt(bfd.StateUp, 7, 1), bfd.StateUp, false, nil},
		{"Up hears Down from its remote: Down, the failure held", up, pkt(bfd.StateDown, 7, 1), bfd.StateDown, false, nil},
		{"Up hears Down, Your Discriminator 0, same remote: Down, the failure held", up, pkt(bfd.StateDown, 7, 0), bfd.StateDown, false, nil},
		{"Up hears AdminDown: Down, no failure (RFC 5882)", up, pkt(bfd.StateAdminDown, 7, 1), bfd.StateDown, false, nil},
		{"Up hears a new remote session's Down: Init, no failure", up, pkt(bfd.StateDown, 9, 0), bfd.StateInit, false, nil},
		{"version 0 discarded", up, bad(func(h *bfd.BFDHeader) { h.Version = 0 }), bfd.StateUp, false, ErrVersion},
		{"Detect Mult 0 discarded", up, bad(func(h *bfd.BFDHeader) { h.DetectTimeMultiplier = 0 }), bfd.StateUp, false, ErrDetectMult},
		{"My Discriminator 0 discarded", up, bad(func(h *bfd.BFDHeader) { h.MyDiscriminator = 0 }), bfd.StateUp, false, ErrMyDiscr},
		{"another session's Your Discriminator discarded", up, pkt(bfd.StateDown, 7, 2), bfd.StateUp, false, ErrYourDiscr},
		{"Up with Your Discriminator 0 discarded", up, pkt(bfd.StateUp, 9, 0), bfd.StateUp, false, ErrUnboundNotDown},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := tc.from(t)
			before := s.Failures()
			c, err := s.Receive(t0.Add(time.Second), tc.in)
			if !errors.Is(err, tc.err) {
				t.Fatalf("error %v, want %v", err, tc.err)
			}
			if s.State() != tc.want || c.To != tc.want || c.Failure != tc.failure || (s.Failures() > before) != tc.failure || c.Failure && c.Reply {
				t.Errorf("state %v (change %+v, failures %d→%d), want %v failure=%v", s.State(), c, before, s.Failures(), tc.want, tc.failure)
			}
		})
	}
}

// TestTimers: slow (1 s) while not Up, the configured interval with a Poll
// once Up until the Final, the remote's RequiredMinRx as a floor, and the
// detection time from the remote's Detect Mult.
func TestTimers(t *testing.T) {
	s := NewSession(fast, 1)
	if got := s.Packet(false).DesiredMinTxInterval; got != 1_000_000 {
		t.Errorf("Down announces DesiredMinTx %d µs, want 1,000,000", got)
	}
	if !s.Deadline().IsZero() {
		t.Error("a Down session has a detection deadline")
	}
	s = up(t)
	p := s.Packet(false)
	if p.DesiredMinTxInterval != 300_000 || !p.Poll || p.YourDiscriminator != 7 {
		t.Errorf("Up sends %+v, want DesiredMinTx 300,000 µs, Poll, Your Discriminator 7", p)
	}
	if iv := s.TxInterval(); iv != 300*time.Millisecond {
		t.Errorf("TxInterval %s, want 300ms", iv)
	}
	fin := pkt(bfd.StateUp, 7, 1)
	fin.Final, fin.RequiredMinRxInterval = true, 500_000
	if _, err := s.Receive(t0.Add(time.Second), fin); err != nil {
		t.Fatal(err)
	}
	if s.Packet(false).Poll {
		t.Error("still polling after the Final")
	}
	if iv := s.TxInterval(); iv != 500*time.Millisecond {
		t.Errorf("TxInterval %s, want the remote's 500ms", iv)
	}
	if d := s.Deadline(); !d.Equal(t0.Add(time.Second + 900*time.Millisecond)) {
		t.Errorf("deadline %s, want 0.9 s after the last packet", d.Sub(t0))
	}
	poll := pkt(bfd.StateUp, 7, 1)
	poll.Poll = true
	if c, _ := s.Receive(t0.Add(time.Second), poll); !c.Reply || !c.Final || !s.Packet(c.Final).Final || s.Packet(c.Final).Poll {
		t.Errorf("a Poll was answered %+v, want a Final now", c)
	}
	s.SetConfig(Config{DesiredMinTx: time.Second, RequiredMinRx: time.Second, DetectMult: 5})
	if p := s.Packet(false); !p.Poll || p.DetectTimeMultiplier != 5 || p.RequiredMinRxInterval != 1_000_000 {
		t.Errorf("after SetConfig sends %+v, want a Poll with the new timers", p)
	}
	none := pkt(bfd.StateUp, 7, 1)
	none.RequiredMinRxInterval = 0
	if _, err := s.Receive(t0.Add(time.Second), none); err != nil || s.TxInterval() != 0 {
		t.Errorf("TxInterval %s (%v), want 0 when the remote wants no packets", s.TxInterval(), err)
	}
}

// TestCheck: only a session that heard nothing for the detection time
// goes Down; only one that was Up counts a failure.
func TestCheck(t *testing.T) {
	s := up(t) // last packet at t0; remote 3 × 300 ms
	if c := s.Check(t0.Add(899 * time.Millisecond)); c.Changed() {
		t.Errorf("Down before the detection time: %+v", c)
	}
	c := s.Check(t0.Add(900 * time.Millisecond))
	if c.To != bfd.StateDown || !c.Failure || c.Reply || s.Failures() != 1 || s.Packet(false).Diagnostic != bfd.DiagnosticControlDetectionTimeExpired {
		t.Errorf("at the detection time: %+v, failures %d, want Down, a failure not answered at once, diag 1", c, s.Failures())
	}
	if s.Packet(false).YourDiscriminator != 0 {
		t.Error("the remote discriminator survived the detection time")
	}
	s = NewSession(fast, 1)
	s.Receive(t0, pkt(bfd.StateDown, 7, 0)) // Init
	if c := s.Check(t0.Add(10 * time.Second)); c.To != bfd.StateDown || c.Failure {
		t.Errorf("Init expiring: %+v, want Down without a failure", c)
	}
}

// TestHeldDown: a Down the remote signals while Up takes the session Down
// and is answered at once, but is a failure only when the session is not
// Up again within HoldTime (one slow interval plus the detection time:
// 1.9 s at 300 ms × 3) — FRR's bfdd closing its session with a Down and
// opening a new one a slow interval later costs no failure; a remote that
// stays Down, or whose new session never comes Up, is one failure, once.
func TestHeldDown(t *testing.T) {
	const hold = time.Second + 900*time.Millisecond
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	recv := func(t *testing.T, s *Session, d time.Duration, h *bfd.BFDHeader) Change {
		t.Helper()
		c, err := s.Receive(at(d), h)
		if err != nil {
			t.Fatal(err)
		}
		if c.Failure {
			t.Fatalf("a packet at %s reported a failure: %+v", d, c)
		}
		return c
	}
	// downAt: s (Up, remote 7) hears its remote's Down at 1 s.
	downAt := func(t *testing.T, your uint32) *Session {
		t.Helper()
		s := up(t)
		down := pkt(bfd.StateDown, 7, your)
		down.DesiredMinTxInterval = 1_000_000 // a Down announces the slow rate
		c := recv(t, s, time.Second, down)
		if c.To != bfd.StateDown || !c.Reply || s.Packet(false).Diagnostic != bfd.DiagnosticNeighborSignaledSessionDown {
			t.Fatalf("Up hearing Down: %+v, diag %v; want Down answered at once with diag 3", c, s.Packet(false).Diagnostic)
		}
		// The hold is of the timers in force while Up, not the Down's slow rate.
		if !s.Held().Equal(at(time.Second+hold)) || !s.Deadline().Equal(s.Held()) {
			t.Fatalf("held until %s (deadline %s), want %s after the Down", s.Held().Sub(t0), s.Deadline().Sub(t0), hold)
		}
		return s
	}

	t.Run("the remote stays Down: one failure at the hold's end", func(t *testing.T) {
		s := downAt(t, 1)
		if c := s.Check(at(time.Second + hold - time.Millisecond)); c.Failure {
			t.Fatalf("failure before the hold ran out: %+v", c)
		}
		c := s.Check(at(time.Second + hold))
		if !c.Failure || c.Changed() || c.Reply || s.Failures() != 1 {
			t.Fatalf("at the hold's end: %+v, failures %d; want one failure, still Down, no reply at once", c, s.Failures())
		}
		if c := s.Check(at(10 * time.Second)); c.Failure || s.Failures() != 1 || !s.Deadline().IsZero() {
			t.Errorf("later: %+v, failures %d, deadline %v; want nothing more", c, s.Failures(), s.Deadline())
		}
	})

	t.Run("FRR's re-keying: old session's Down, a new one a slow interval later", func(t *testing.T) {
		s := downAt(t, 1)
		recv(t, s, 2*time.Second, pkt(bfd.StateDown, 9, 0)) // the new session: Init
		if s.State() != bfd.StateInit {
			t.Fatalf("state %v after the new session's Down, want Init", s.State())
		}
		recv(t, s, 2*time.Second+time.Millisecond, pkt(bfd.StateInit, 9, 1)) // Up
		if s.State() != bfd.StateUp || !s.Held().IsZero() {
			t.Fatalf("state %v, held %v; want Up, nothing held", s.State(), s.Held())
		}
		for d := 2 * time.Second; d < 6*time.Second; d += 100 * time.Millisecond {
			recv(t, s, d, pkt(bfd.StateUp, 9, 1))
			if c := s.Check(at(d)); c.Failure || c.Changed() {
				t.Fatalf("at %s: %+v", d, c)
			}
		}
		if s.Failures() != 0 {
			t.Errorf("failures %d, want 0", s.Failures())
		}
	})

	t.Run("the same session restarted (Your Discriminator 0): back Up, no failure", func(t *testing.T) {
		s := downAt(t, 0)
		recv(t, s, 1300*time.Millisecond, pkt(bfd.StateDown, 7, 0)) // Init
		recv(t, s, 1301*time.Millisecond, pkt(bfd.StateUp, 7, 1))   // Up
		if c := s.Check(at(1400 * time.Millisecond)); s.State() != bfd.StateUp || c.Failure || s.Failures() != 0 {
			t.Errorf("state %v, %+v, failures %d; want Up without a failure", s.State(), c, s.Failures())
		}
	})

	t.Run("AdminDown during the hold: no failure", func(t *testing.T) {
		s := downAt(t, 1)
		recv(t, s, 1500*time.Millisecond, pkt(bfd.StateAdminDown, 7, 1))
		if c := s.Check(at(time.Minute)); c.Failure || s.Failures() != 0 {
			t.Errorf("%+v, failures %d after AdminDown; want none", c, s.Failures())
		}
	})

	t.Run("Init that expires during the hold: one failure, at the hold's end", func(t *testing.T) {
		s := downAt(t, 1)
		recv(t, s, 1200*time.Millisecond, pkt(bfd.StateDown, 9, 0)) // Init, then silence
		if !s.Deadline().Equal(at(2100 * time.Millisecond)) {
			t.Fatalf("deadline %s, want Init's detection time first (2.1 s)", s.Deadline().Sub(t0))
		}
		if c := s.Check(at(2100 * time.Millisecond)); c.Failure || c.To != bfd.StateDown {
			t.Fatalf("Init expiring: %+v, want Down without a failure yet", c)
		}
		if c := s.Check(at(time.Second + hold)); !c.Failure || s.Failures() != 1 {
			t.Errorf("at the hold's end: %+v, failures %d; want one failure", c, s.Failures())
		}
	})

	t.Run("a new remote session's Down while Up: nothing held", func(t *testing.T) {
		s := up(t)
		recv(t, s, time.Second, pkt(bfd.StateDown, 9, 0))
		if !s.Held().IsZero() || s.State() != bfd.StateInit {
			t.Errorf("state %v, held %v; want Init with nothing held", s.State(), s.Held())
		}
	})
}

// pair runs two sessions against each other on a simulated clock, each
// sending a packet every interval, with a lossy wire: drop(from, i)
// drops the i-th packet from side from (0 or 1).
type pair struct {
	s    [2]*Session
	now  time.Time
	fail [2]int
}

func (p *pair) run(t *testing.T, d time.Duration, drop func(from int) bool) {
	t.Helper()
	end := p.now.Add(d)
	for ; p.now.Before(end); p.now = p.now.Add(10 * time.Millisecond) {
		for i := range 2 {
			if c := p.s[i].Check(p.now); c.Failure {
				p.fail[i]++
			}
		}
		// Both send every 100 ms (jitter is the adapter's).
		if p.now.Sub(t0)%(100*time.Millisecond) != 0 {
			continue
		}
		for from := range 2 {
			if drop != nil && drop(from) {
				continue
			}
			c, err := p.s[1-from].Receive(p.now, p.s[from].Packet(false))
			if err != nil && !errors.Is(err, ErrYourDiscr) { // the old remote's, after a new session
				t.Fatalf("side %d discarded side %d's packet: %v", 1-from, from, err)
			}
			if c.Failure {
				p.fail[1-from]++
			}
		}
	}
}

// TestPair: two sessions come Up; a one-way loss fails both (the deaf
// side by its detection time, the other by the Down it then hears, when
// the session does not come back within the hold); a remote that
// re-creates its session at once, or closes it with a Down and opens a new
// one a second later (FRR's re-keying), costs no failure.
func TestPair(t *testing.T) {
	p := &pair{s: [2]*Session{NewSession(fast, 1), NewSession(fast, 2)}, now: t0}
	p.run(t, time.Second, nil)
	if p.s[0].State() != bfd.StateUp || p.s[1].State() != bfd.StateUp {
		t.Fatalf("states %v %v, want both Up", p.s[0].State(), p.s[1].State())
	}
	p.s[1] = NewSession(fast, 3) // the remote's new session
	p.run(t, 2*time.Second, nil)
	if p.fail != [2]int{} || p.s[0].State() != bfd.StateUp || p.s[1].State() != bfd.StateUp {
		t.Errorf("after the remote's new session: failures %v, states %v %v; want none, both Up", p.fail, p.s[0].State(), p.s[1].State())
	}
	// The remote closes its session with a Down, is silent for a second,
	// then opens a new one.
	if _, err := p.s[0].Receive(p.now, &bfd.BFDHeader{Version: 1, State: bfd.StateDown, Diagnostic: bfd.DiagnosticPathDown,
		DetectTimeMultiplier: 3, MyDiscriminator: 3, YourDiscriminator: 1, DesiredMinTxInterval: 1_000_000, RequiredMinRxInterval: 300_000}); err != nil {
		t.Fatal(err)
	}
	p.s[1] = NewSession(fast, 4)
	p.run(t, time.Second, func(from int) bool { return from == 1 })
	p.run(t, 2*time.Second, nil)
	if p.fail != [2]int{} || p.s[0].State() != bfd.StateUp || p.s[1].State() != bfd.StateUp {
		t.Errorf("after the remote's Down and a new session a second later: failures %v, states %v %v; want none, both Up", p.fail, p.s[0].State(), p.s[1].State())
	}
	p.run(t, 4*time.Second, func(from int) bool { return from == 1 }) // side 0 goes deaf
	if p.fail != [2]int{1, 1} {
		t.Errorf("one-way loss: failures %v, want one on each side", p.fail)
	}
}

// FuzzSession: no packet sequence panics; a packet never reports a
// failure; Check reports one only for a session that was Up (its detection
// time ran out) or holds a Down the remote signalled, which it then no
// longer holds; a held Down ends only by coming Up, AdminDown, that
// failure or disabling; a disabled session has no deadline and disabling
// is no failure; and Failures counts exactly the failures reported.
func FuzzSession(f *testing.F) {
	f.Add([]byte{0x20, 0x40, 3, 24, 0, 0, 0, 7, 0, 0, 0, 0, 0, 4, 0x93, 0xe0, 0, 4, 0x93, 0xe0})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := NewSession(fast, 1)
		now := t0
		var fails uint64
		for len(b) >= 24 {
			var h bfd.BFDHeader
			if err := h.UnmarshalBinary(b[:24]); err == nil {
				held := s.Held()
				c, _ := s.Receive(now, &h)
				if c.Failure {
					t.Fatalf("a packet reported a failure: %+v", c)
				}
				if !held.IsZero() && !s.Held().Equal(held) && s.State() != bfd.StateUp && h.State != bfd.StateAdminDown {
					t.Fatalf("a %v packet ended a held Down in %v", h.State, s.State())
				}
			}
			now = now.Add(time.Duration(b[0]) * 10 * time.Millisecond)
			from, held := s.State(), s.Held()
			c := s.Check(now)
			if c.Failure {
				fails++
				if from != bfd.StateUp && (held.IsZero() || now.Before(held) || !s.Held().IsZero()) {
					t.Fatalf("a failure from %v with held %v at %v", from, held, now)
				}
			} else if from == bfd.StateUp && c.To != bfd.StateUp {
				t.Fatalf("Up → %v by the timers without a failure", c.To)
			}
			if b[1]&0x3f == 0x3f { // now and then, turn it off or on
				was := s.Sending()
				if c := s.SetEnabled(!was); c.Failure || was && (s.State() != bfd.StateDown || !s.Held().IsZero()) {
					t.Fatalf("SetEnabled(%v): %+v, state %v, held %v", !was, c, s.State(), s.Held())
				}
			}
			if !s.Sending() && !s.Deadline().IsZero() {
				t.Fatalf("a disabled session has a deadline")
			}
			b = b[24:]
		}
		if s.Failures() != fails {
			t.Fatalf("Failures %d, counted %d", s.Failures(), fails)
		}
	})
}

// settled is an Up session (fast timers) whose first Poll Sequence has
// ended, with a remote that sends every remoteTx and takes a packet
// every remoteRx.
func settled(t *testing.T, remoteTx, remoteRx time.Duration) *Session {
	t.Helper()
	s := up(t)
	fin := pkt(bfd.StateUp, 7, 1)
	fin.Final = true
	fin.DesiredMinTxInterval, fin.RequiredMinRxInterval = uint32(remoteTx/time.Microsecond), uint32(remoteRx/time.Microsecond)
	if _, err := s.Receive(t0, fin); err != nil || s.Packet(false).Poll {
		t.Fatalf("the first Poll Sequence did not end: %v", err)
	}
	return s
}

// final is the remote's answer to a Poll, received at t0.
func final(t *testing.T, s *Session, remoteTx, remoteRx time.Duration) {
	t.Helper()
	fin := pkt(bfd.StateUp, 7, 1)
	fin.Final = true
	fin.DesiredMinTxInterval, fin.RequiredMinRxInterval = uint32(remoteTx/time.Microsecond), uint32(remoteRx/time.Microsecond)
	if _, err := s.Receive(t0, fin); err != nil {
		t.Fatal(err)
	}
}

// TestSetConfigPollSequence: a timer change while Up is announced at once
// with a Poll; a slower transmission and a faster reception take effect
// only at the remote's Final, a faster transmission and a slower
// reception at once (RFC 5880 §6.8.3); a second change during an open
// Poll Sequence gets its own Poll after the first Final; a session that is
// not Up takes a change without a Poll.
func TestSetConfigPollSequence(t *testing.T) {
	const remote = 50 * time.Millisecond // the remote sends and takes fast
	cfg := func(tx, rx time.Duration) Config { return Config{DesiredMinTx: tx, RequiredMinRx: rx, DetectMult: 3} }
	for _, tc := range []struct {
		name                     string
		to                       Config
		txPolling, detectPolling time.Duration // while the Poll is open
		txAfter, detectAfter     time.Duration // after the Final
	}{
		{"slower transmission waits for the Final", cfg(time.Second, 300*time.Millisecond),
			300 * time.Millisecond, 900 * time.Millisecond, time.Second, 900 * time.Millisecond},
		{"faster transmission at once", cfg(100*time.Millisecond, 300*time.Millisecond),
			100 * time.Millisecond, 900 * time.Millisecond, 100 * time.Millisecond, 900 * time.Millisecond},
		{"faster reception waits for the Final", cfg(300*time.Millisecond, 100*time.Millisecond),
			300 * time.Millisecond, 900 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond},
		{"slower reception at once", cfg(300*time.Millisecond, time.Second),
			300 * time.Millisecond, 3 * time.Second, 300 * time.Millisecond, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := settled(t, remote, remote)
			s.SetConfig(tc.to)
			p := s.Packet(false)
			if !p.Poll || p.DesiredMinTxInterval != uint32(tc.to.DesiredMinTx/time.Microsecond) || p.RequiredMinRxInterval != uint32(tc.to.RequiredMinRx/time.Microsecond) {
				t.Errorf("after SetConfig sends %+v, want a Poll with the new timers", p)
			}
			if s.TxInterval() != tc.txPolling || s.DetectTime() != tc.detectPolling {
				t.Errorf("while polling: TxInterval %s, detection %s; want %s, %s", s.TxInterval(), s.DetectTime(), tc.txPolling, tc.detectPolling)
			}
			final(t, s, remote, remote)
			if s.Packet(false).Poll || s.TxInterval() != tc.txAfter || s.DetectTime() != tc.detectAfter {
				t.Errorf("after the Final: Poll %v, TxInterval %s, detection %s; want no Poll, %s, %s",
					s.Packet(false).Poll, s.TxInterval(), s.DetectTime(), tc.txAfter, tc.detectAfter)
			}
		})
	}

	t.Run("a change during an open Poll Sequence polls again", func(t *testing.T) {
		s := settled(t, remote, remote)
		s.SetConfig(cfg(time.Second, 300*time.Millisecond))
		s.SetConfig(cfg(2*time.Second, 300*time.Millisecond))
		if s.TxInterval() != 300*time.Millisecond {
			t.Errorf("TxInterval %s before any Final, want the old 300ms", s.TxInterval())
		}
		final(t, s, remote, remote) // answers the first Poll only
		if p := s.Packet(false); !p.Poll || s.TxInterval() != time.Second {
			t.Errorf("after the first Final: Poll %v, TxInterval %s; want a new Poll and the first change's 1s", p.Poll, s.TxInterval())
		}
		final(t, s, remote, remote)
		if s.Packet(false).Poll || s.TxInterval() != 2*time.Second {
			t.Errorf("after the second Final: Poll %v, TxInterval %s; want no Poll, 2s", s.Packet(false).Poll, s.TxInterval())
		}
	})

	t.Run("not Up: at once, no Poll", func(t *testing.T) {
		s := NewSession(fast, 1)
		s.SetConfig(cfg(100*time.Millisecond, 100*time.Millisecond))
		if _, err := s.Receive(t0, pkt(bfd.StateDown, 7, 0)); err != nil {
			t.Fatal(err)
		}
		if p := s.Packet(false); p.Poll || p.RequiredMinRxInterval != 100_000 || s.DetectTime() != 900*time.Millisecond {
			t.Errorf("Init after SetConfig: %+v, detection %s; want no Poll, RequiredMinRx 100ms, 3 × the remote's 300ms", p, s.DetectTime())
		}
	})

	t.Run("a stray Final changes nothing", func(t *testing.T) {
		s := settled(t, remote, remote)
		final(t, s, remote, remote)
		if s.Packet(false).Poll || s.TxInterval() != 300*time.Millisecond {
			t.Errorf("Poll %v, TxInterval %s after a Final with no Poll open", s.Packet(false).Poll, s.TxInterval())
		}
	})
}

// TestSetEnabled: a disabled session is Down, sends nothing, discards
// every packet and has no deadline; disabling an Up session, or one
// holding a remote's Down, is no failure and forgets the remote; the
// failure count stays; enabling wants a packet now and starts from Down.
func TestSetEnabled(t *testing.T) {
	s := up(t)
	s.Check(t0.Add(time.Second)) // a failure: the count must survive
	if s.Failures() != 1 {
		t.Fatalf("failures %d, want 1", s.Failures())
	}
	s = up(t)
	if c := s.SetEnabled(true); c.Changed() || c.Reply {
		t.Errorf("enabling an enabled session: %+v, want nothing", c)
	}
	c := s.SetEnabled(false)
	if c.From != bfd.StateUp || c.To != bfd.StateDown || c.Failure || c.Reply || s.Sending() || s.Failures() != 0 {
		t.Errorf("disabling an Up session: %+v, sending %v, failures %d; want Down, no failure, silent", c, s.Sending(), s.Failures())
	}
	if c, err := s.Receive(t0, pkt(bfd.StateInit, 7, 1)); !errors.Is(err, ErrDisabled) || c.Changed() {
		t.Errorf("a disabled session took a packet: %+v, %v", c, err)
	}
	if !s.Deadline().IsZero() {
		t.Errorf("a disabled session has a deadline at %s", s.Deadline().Sub(t0))
	}
	if c := s.SetEnabled(true); !c.Reply || !s.Sending() || s.State() != bfd.StateDown || s.Packet(false).YourDiscriminator != 0 {
		t.Errorf("enabling: %+v, sending %v, state %v, Your Discriminator %d; want a packet now, Down, the remote forgotten",
			c, s.Sending(), s.State(), s.Packet(false).YourDiscriminator)
	}
	if _, err := s.Receive(t0, pkt(bfd.StateDown, 9, 0)); err != nil || s.State() != bfd.StateInit {
		t.Errorf("enabled again: %v, state %v; want Init from a Down", err, s.State())
	}

	s = up(t)
	s.Receive(t0.Add(time.Second), pkt(bfd.StateDown, 7, 1)) // held
	s.SetEnabled(false)
	if c := s.Check(t0.Add(time.Minute)); c.Failure || s.Failures() != 0 || !s.Held().IsZero() {
		t.Errorf("a held Down after disabling: %+v, failures %d; want none", c, s.Failures())
	}
}
