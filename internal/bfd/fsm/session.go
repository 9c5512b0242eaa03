package fsm

import (
	"errors"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bfd"
)

// Config is one session's timers (a BFDProfile, resolved).
type Config struct {
	// DesiredMinTx is how often this node wants to send once Up;
	// RequiredMinRx how often it can take packets; DetectMult how many
	// missed packets make the path down.
	DesiredMinTx, RequiredMinRx time.Duration
	DetectMult                  uint8
}

// SlowTx is the slowest this end may announce while not Up (RFC 5880
// §6.8.3: not less than one second).
const SlowTx = time.Second

// Why a received packet is discarded (RFC 5880 §6.8.6).
var (
	ErrVersion        = errors.New("bfd: version is not 1")
	ErrDetectMult     = errors.New("bfd: Detect Mult is zero")
	ErrMultipoint     = errors.New("bfd: Multipoint bit set")
	ErrMyDiscr        = errors.New("bfd: My Discriminator is zero")
	ErrYourDiscr      = errors.New("bfd: Your Discriminator is not this session's")
	ErrUnboundNotDown = errors.New("bfd: Your Discriminator is zero in a packet that is not Down or AdminDown")
	ErrDisabled       = errors.New("bfd: the session is disabled")
)

// Session is one asynchronous-mode BFD session's state machine (RFC 5880
// §6.2, §6.8): packets in, state and packets out. It reads no clock and
// sends nothing: the caller passes the time and sends what Packet says.
//
// One rule departs from the letter of §6.8.6: a Down packet with Your
// Discriminator zero and a My Discriminator other than the one this
// session is bound to comes from a new session of the remote system (a
// restarted daemon, or FRR's bfdd re-creating a BGP neighbour's session
// once BGP told it the interface, with a new discriminator and source
// port). The session goes back through Down to Init with it without
// reporting a failure: the path evidently carries packets. The RFC would
// take the Down at face value and so reset BGP; GoBGP 4.8 drops such
// packets and resets BGP when its detection time then expires. Both
// reset a healthy session (docs/bgp.md, "BFD against FRR").
//
// And one addition: a Down the remote system signals while the session is
// Up takes the session Down at once, as the RFC says, but is reported as a
// failure only when the session is not Up again within HoldTime (one slow
// packet interval plus the detection time in force). FRR's bfdd, when BGP
// gives it the session's local address after the session came up, closes
// its session with a Down and opens a new one whose first packet comes at
// the slow rate; FRR 8.4's bgpd then resets BGP itself (the agent keeps
// its BFD from coming Up before BGP for that), a router that does not
// reset must not see this end do it instead. A remote that signals Down has
// already acted on it (withdrawn the node's routes, reset its BGP session),
// so waiting costs the path nothing; only this end's own BGP reset comes
// HoldTime later. A failure this end detects itself (Check, the detection
// time) is reported at once.
type Session struct {
	cfg   Config
	local uint32 // bfd.LocalDiscr

	state bfd.StateType
	diag  bfd.DiagnosticType

	remote          uint32 // bfd.RemoteDiscr, 0 while unbound
	remoteState     bfd.StateType
	remoteMinRx     time.Duration // bfd.RemoteMinRxInterval
	remoteDesiredTx time.Duration
	remoteMult      uint8

	// poll is set while a Poll Sequence for a timer change is open;
	// polled is the Config it announces.
	poll   bool
	polled Config
	// txUsed and rxUsed are the DesiredMinTx and RequiredMinRx in force:
	// while Up, a slower transmission or a faster reception announced by
	// a Poll Sequence takes effect only at its Final (§6.8.3: the remote
	// may go on using the old values until it has answered).
	txUsed, rxUsed time.Duration
	// lastRx is when the last accepted packet came.
	lastRx time.Time
	// held is when a Down the remote signalled while Up becomes a failure
	// unless the session is Up again (zero: none held).
	held time.Time
	// disabled: the session is Down, sends nothing and takes nothing
	// (SetEnabled).
	disabled bool
	// failures counts the failures reported (Change.Failure).
	failures uint64
}

// Change says what a packet or a timer did to the session.
type Change struct {
	From, To bfd.StateType
	// Failure: the path failed — the detection time expired while Up, or
	// the remote system said Down while Up and the session did not come
	// back within HoldTime (then From and To may both be Down) — what
	// resets BGP. Not for AdminDown (RFC 5882 §3.2) nor a remote's new
	// session.
	Failure bool
	// Reply: send Packet(Final) now (the Final of a Poll, or a state
	// change the remote should learn before the next periodic packet;
	// never a failure's Down, which waits for the client's reaction).
	Reply, Final bool
}

// Changed reports whether the state moved.
func (c Change) Changed() bool { return c.From != c.To }

// NewSession returns a Down session with local discriminator local
// (nonzero, unique on the node).
func NewSession(cfg Config, local uint32) *Session {
	return &Session{cfg: cfg, local: local, state: bfd.StateDown, remoteState: bfd.StateDown,
		txUsed: cfg.DesiredMinTx, rxUsed: cfg.RequiredMinRx,
		remoteMinRx: time.Microsecond} // §6.8.1: RemoteMinRxInterval starts at 1
}

// State is the session's state.
func (s *Session) State() bfd.StateType { return s.state }

// Failures counts the session's path failures while Up.
func (s *Session) Failures() uint64 { return s.failures }

// Config is the session's timers (the latest SetConfig).
func (s *Session) Config() Config { return s.cfg }

// LocalDiscr is the session's own discriminator.
func (s *Session) LocalDiscr() uint32 { return s.local }

// SetConfig changes the timers; packets carry the new values from now
// on. While Up a Poll Sequence tells the remote, and until its Final the
// session keeps sending at the old interval when the new one is slower,
// and keeps detecting with the old RequiredMinRx when the new one is
// faster (RFC 5880 §6.8.3); a change during an open Poll Sequence gets a
// Poll Sequence of its own once that one ends.
func (s *Session) SetConfig(cfg Config) {
	if cfg == s.cfg {
		return
	}
	s.cfg = cfg
	if s.state != bfd.StateUp {
		s.txUsed, s.rxUsed = cfg.DesiredMinTx, cfg.RequiredMinRx
		return
	}
	s.txUsed, s.rxUsed = min(s.txUsed, cfg.DesiredMinTx), max(s.rxUsed, cfg.RequiredMinRx)
	if !s.poll {
		s.startPoll()
	}
}

func (s *Session) startPoll() { s.poll, s.polled = true, s.cfg }

// endPoll takes a Final: the remote has the polled timers.
func (s *Session) endPoll() {
	s.poll = false
	s.txUsed, s.rxUsed = s.polled.DesiredMinTx, s.polled.RequiredMinRx
	if s.polled != s.cfg { // changed while the Poll Sequence was open
		s.txUsed, s.rxUsed = min(s.txUsed, s.cfg.DesiredMinTx), max(s.rxUsed, s.cfg.RequiredMinRx)
		s.startPoll()
	}
}

// SetEnabled turns the session on or off. A disabled session is Down,
// discards every packet (ErrDisabled) and sends none (Sending); disabling
// forgets the remote and a held Down (no failure: whoever disables the
// session no longer needs it watched), and keeps the failure count. An
// enabled session starts over from Down and wants a packet sent now.
func (s *Session) SetEnabled(on bool) Change {
	c := Change{From: s.state, To: s.state}
	if on != s.disabled {
		return c
	}
	s.disabled = !on
	if on {
		c.Reply = true
		return c
	}
	s.down(bfd.DiagnosticAdministrativelyDown)
	s.remote, s.held = 0, time.Time{}
	c.To = s.state
	return c
}

// Sending reports whether the session sends packets (it is enabled).
func (s *Session) Sending() bool { return !s.disabled }

// Receive applies a packet received at now. A packet that must be
// discarded returns an error and changes nothing.
func (s *Session) Receive(now time.Time, h *bfd.BFDHeader) (Change, error) {
	if s.disabled {
		return Change{From: s.state, To: s.state}, ErrDisabled
	}
	if err := s.valid(h); err != nil {
		return Change{From: s.state, To: s.state}, err
	}
	c := Change{From: s.state}
	hold := s.HoldTime() // with the timers in force, not the packet's
	if h.YourDiscriminator == 0 && s.remote != 0 && h.MyDiscriminator != s.remote && s.state != bfd.StateDown {
		// The remote system's new session: start over with it.
		s.down(bfd.DiagnosticNeighborSignaledSessionDown)
	}
	s.remote = h.MyDiscriminator
	s.remoteState = h.State
	s.remoteMinRx = time.Duration(h.RequiredMinRxInterval) * time.Microsecond
	s.remoteDesiredTx = time.Duration(h.DesiredMinTxInterval) * time.Microsecond
	s.remoteMult = h.DetectTimeMultiplier
	s.lastRx = now
	if h.Final && s.poll {
		s.endPoll()
	}

	switch h.State {
	case bfd.StateAdminDown:
		s.held = time.Time{} // deliberate: no failure (RFC 5882 §3.2)
		if s.state != bfd.StateDown {
			s.down(bfd.DiagnosticNeighborSignaledSessionDown)
		}
	case bfd.StateDown:
		switch s.state {
		case bfd.StateDown:
			s.state, s.diag = bfd.StateInit, bfd.DiagnosticNoDiagnostic
		case bfd.StateUp:
			s.held = now.Add(hold)
			s.down(bfd.DiagnosticNeighborSignaledSessionDown)
		}
	case bfd.StateInit:
		if s.state == bfd.StateDown || s.state == bfd.StateInit {
			s.up()
		}
	case bfd.StateUp:
		if s.state == bfd.StateInit {
			s.up()
		}
	}
	c.To = s.state
	c.Final = h.Poll
	// A Down the remote signalled is answered at once too: the remote
	// knows.
	c.Reply = h.Poll || c.Changed()
	return c, nil
}

// HoldTime is how long a Down the remote signals while Up waits for the
// session to come Up again before it is a failure: one packet interval at
// the slow rate (a remote's new session sends its first packets at it)
// plus the detection time in force.
func (s *Session) HoldTime() time.Duration { return SlowTx + s.DetectTime() }

// valid applies §6.8.6's discard rules (no authentication, no demand
// mode here: the A bit is not decoded by the packet library and this end
// never asks for demand mode).
func (s *Session) valid(h *bfd.BFDHeader) error {
	switch {
	case h.Version != 1:
		return ErrVersion
	case h.DetectTimeMultiplier == 0:
		return ErrDetectMult
	case h.MyDiscriminator == 0:
		return ErrMyDiscr
	case h.YourDiscriminator != 0 && h.YourDiscriminator != s.local:
		return ErrYourDiscr
	case h.YourDiscriminator == 0 && h.State != bfd.StateDown && h.State != bfd.StateAdminDown:
		return ErrUnboundNotDown
	}
	return nil
}

func (s *Session) up() {
	s.state, s.diag, s.held = bfd.StateUp, bfd.DiagnosticNoDiagnostic, time.Time{}
	// DesiredMinTx drops from SlowTx to the configured interval at once
	// (faster is safe); a Poll Sequence tells the remote (§6.8.3).
	s.txUsed, s.rxUsed = s.cfg.DesiredMinTx, s.cfg.RequiredMinRx
	if s.cfg.DesiredMinTx != s.announcedTx(bfd.StateInit) {
		s.startPoll()
	}
}

func (s *Session) down(d bfd.DiagnosticType) {
	s.state, s.diag, s.poll = bfd.StateDown, d, false
	s.txUsed, s.rxUsed = s.cfg.DesiredMinTx, s.cfg.RequiredMinRx
}

// Check applies the timers at now: a session in Init or Up that heard
// nothing for the detection time goes Down (a failure when it was Up),
// and a held Down of the remote's whose HoldTime passed is a failure.
func (s *Session) Check(now time.Time) Change {
	c := Change{From: s.state, To: s.state}
	if !s.held.IsZero() && !now.Before(s.held) {
		s.held = time.Time{}
		c.Failure = true
	}
	if d := s.detectDeadline(); !d.IsZero() && !now.Before(d) {
		s.down(bfd.DiagnosticControlDetectionTimeExpired)
		s.remote = 0 // §6.8.1: reset when the detection time passes
		c.To = s.state
		c.Failure = c.Failure || c.From == bfd.StateUp
	}
	if c.Failure {
		s.failures++
	}
	// Not at once after a failure: the client resets BGP first, so the
	// router learns of it from BGP's Cease before BFD's Down (BIRD stops
	// a session whose BFD went down and waits its error wait time, 60 s
	// by default, before it connects again). The Down goes with the next
	// periodic packet.
	return c
}

// Held is when a Down the remote signalled while Up becomes a failure
// unless the session is Up again; zero when none is held.
func (s *Session) Held() time.Time { return s.held }

// Deadline is when Check has something to do: the detection time runs
// out (in Init or Up) or a held Down becomes a failure; zero for never.
func (s *Session) Deadline() time.Time {
	d := s.detectDeadline()
	if !s.held.IsZero() && (d.IsZero() || s.held.Before(d)) {
		d = s.held
	}
	return d
}

func (s *Session) detectDeadline() time.Time {
	if s.state != bfd.StateInit && s.state != bfd.StateUp {
		return time.Time{}
	}
	return s.lastRx.Add(s.DetectTime())
}

// DetectTime is §6.8.4's asynchronous-mode detection time: the remote's
// Detect Mult times the slower of this end's RequiredMinRx (the one in
// force) and the remote's DesiredMinTx.
func (s *Session) DetectTime() time.Duration {
	return time.Duration(s.remoteMult) * max(s.rxUsed, s.remoteDesiredTx)
}

// TxInterval is the interval between periodic packets before jitter
// (§6.8.7): the slower of this end's DesiredMinTx in force and what the
// remote can take; 0 means send none (the remote asked for none, RequiredMinRx
// zero).
func (s *Session) TxInterval() time.Duration {
	if s.remoteMinRx == 0 {
		return 0
	}
	tx := s.announcedTx(s.state)
	if s.state == bfd.StateUp {
		tx = s.txUsed
	}
	return max(tx, s.remoteMinRx)
}

// announcedTx is the DesiredMinTx this end announces in state st.
func (s *Session) announcedTx(st bfd.StateType) time.Duration {
	if st != bfd.StateUp {
		return max(s.cfg.DesiredMinTx, SlowTx)
	}
	return s.cfg.DesiredMinTx
}

// Packet is the control packet to send now; final answers a Poll.
func (s *Session) Packet(final bool) *bfd.BFDHeader {
	return &bfd.BFDHeader{
		Version: 1, Diagnostic: s.diag, State: s.state,
		Poll: s.poll && !final, Final: final,
		DetectTimeMultiplier: s.cfg.DetectMult,
		MyDiscriminator:      s.local, YourDiscriminator: s.remote,
		DesiredMinTxInterval:  uint32(s.announcedTx(s.state) / time.Microsecond),
		RequiredMinRxInterval: uint32(s.cfg.RequiredMinRx / time.Microsecond),
	}
}
