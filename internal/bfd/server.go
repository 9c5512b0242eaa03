package bfd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/osrg/gobgp/v4/pkg/packet/bfd"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"

	"github.com/mooringlb/mooring/internal/bfd/fsm"
)

// Config is one session's timers (a BFDProfile, resolved).
type Config = fsm.Config

// Port is where single-hop BFD control packets go (RFC 5881 §4).
const Port = 3784

// The source ports RFC 5881 §4 allows.
const srcPortMin, srcPortMax = 49152, 65535

// gtsmTTL is the TTL (hop limit) every packet is sent with and every
// packet received must carry (RFC 5881 §5, without authentication): a
// packet from beyond the link cannot have it.
const gtsmTTL = 255

// Server runs the node's BFD sessions, one per peer address. Its sockets
// are opened in the network namespace of the goroutine that calls Add.
type Server struct {
	log *slog.Logger
	now func() time.Time

	mu    sync.Mutex
	peers map[netip.Addr]*peer
	ln4   *ipv4.PacketConn
	ln6   *ipv6.PacketConn
	wg    sync.WaitGroup
	// discrs holds the local discriminators in use.
	discrs map[uint32]bool
	closed bool
}

// Events are what a session tells its owner, from the session's
// goroutine.
type Events struct {
	// Failure: the path failed while Up (reset the BGP session). The
	// session's Down packet waits until it returns, so the remote hears of
	// the failure from what Failure did first; it must return within a
	// second or two (BFD packets wait meanwhile).
	Failure func()
	// Changed: the state moved (update the status); must not block.
	Changed func()
}

type peer struct {
	addr netip.Addr
	conn *net.UDPConn
	ev   Events
	rx   chan *bfd.BFDHeader
	cfg  chan Config
	// enable carries the latest SetEnabled not yet taken.
	enable chan bool
	stop   chan struct{}
	mu     sync.Mutex
	s      *fsm.Session
	stats  Stats
}

// Stats counts one session's packets.
type Stats struct {
	Sent, Received, Discarded, SendErrors uint64
}

// NewServer returns a Server with no sessions and no sockets.
func NewServer(log *slog.Logger) *Server {
	return &Server{log: log, now: time.Now, peers: map[netip.Addr]*peer{}, discrs: map[uint32]bool{}}
}

// Add starts a session with the peer at addr, sending from local (any
// address of the node when invalid), enabled or not (SetEnabled).
func (s *Server) Add(addr, local netip.Addr, cfg Config, enabled bool, ev Events) error {
	addr = addr.Unmap()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("bfd: server closed")
	}
	if _, ok := s.peers[addr]; ok {
		return fmt.Errorf("bfd: a session with %s exists", addr)
	}
	if err := s.listen(addr.Is4()); err != nil {
		return err
	}
	conn, err := sender(addr, local)
	if err != nil {
		return err
	}
	var discr uint32
	for discr == 0 || s.discrs[discr] {
		discr = rand.Uint32()
	}
	s.discrs[discr] = true
	p := &peer{addr: addr, conn: conn, ev: ev, rx: make(chan *bfd.BFDHeader, 8), cfg: make(chan Config, 1),
		enable: make(chan bool, 1), stop: make(chan struct{}), s: fsm.NewSession(cfg, discr)}
	p.s.SetEnabled(enabled)
	s.peers[addr] = p
	s.wg.Go(func() { s.run(p) })
	return nil
}

// SetConfig changes a session's timers in place.
func (s *Server) SetConfig(addr netip.Addr, cfg Config) {
	s.mu.Lock()
	p := s.peers[addr.Unmap()]
	s.mu.Unlock()
	if p == nil {
		return
	}
	select {
	case <-p.cfg: // replace a change not yet taken
	default:
	}
	p.cfg <- cfg
}

// SetEnabled turns a session on or off in place: a disabled one is Down,
// sends nothing and ignores what it receives, and keeps its failure count
// (fsm.Session.SetEnabled).
func (s *Server) SetEnabled(addr netip.Addr, on bool) {
	s.mu.Lock()
	p := s.peers[addr.Unmap()]
	s.mu.Unlock()
	if p == nil {
		return
	}
	for {
		select {
		case p.enable <- on:
			return
		default:
			select {
			case <-p.enable: // replace a change not yet taken
			default:
			}
		}
	}
}

// Remove ends the session with addr, silently: the remote's detection
// time decides, as when the node goes away.
func (s *Server) Remove(addr netip.Addr) {
	s.mu.Lock()
	p := s.peers[addr.Unmap()]
	if p != nil {
		delete(s.peers, p.addr)
		delete(s.discrs, p.s.LocalDiscr())
		close(p.stop)
	}
	s.mu.Unlock()
}

// State reports a session's state, its failures and packet counts.
func (s *Server) State(addr netip.Addr) (st bfd.StateType, failures uint64, stats Stats, ok bool) {
	s.mu.Lock()
	p := s.peers[addr.Unmap()]
	s.mu.Unlock()
	if p == nil {
		return bfd.StateDown, 0, Stats{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.s.State(), p.s.Failures(), p.stats, true
}

// Close ends every session and closes the sockets.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	for a, p := range s.peers {
		delete(s.peers, a)
		close(p.stop)
	}
	if s.ln4 != nil {
		s.ln4.Close()
	}
	if s.ln6 != nil {
		s.ln6.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

// listen opens the family's listener on Port once.
func (s *Server) listen(v4 bool) error {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return reuseAddr(c) }}
	if v4 && s.ln4 == nil {
		c, err := lc.ListenPacket(context.Background(), "udp4", fmt.Sprintf("0.0.0.0:%d", Port))
		if err != nil {
			return fmt.Errorf("bfd: listening on UDP %d (IPv4): %w", Port, err)
		}
		pc := ipv4.NewPacketConn(c)
		if err := pc.SetControlMessage(ipv4.FlagTTL, true); err != nil {
			c.Close()
			return fmt.Errorf("bfd: asking for the TTL of received packets: %w", err)
		}
		s.ln4 = pc
		s.wg.Go(func() { s.read4(pc) })
	}
	if !v4 && s.ln6 == nil {
		c, err := lc.ListenPacket(context.Background(), "udp6", fmt.Sprintf("[::]:%d", Port))
		if err != nil {
			return fmt.Errorf("bfd: listening on UDP %d (IPv6): %w", Port, err)
		}
		pc := ipv6.NewPacketConn(c)
		if err := pc.SetControlMessage(ipv6.FlagHopLimit, true); err != nil {
			c.Close()
			return fmt.Errorf("bfd: asking for the hop limit of received packets: %w", err)
		}
		s.ln6 = pc
		s.wg.Go(func() { s.read6(pc) })
	}
	return nil
}

func (s *Server) read4(pc *ipv4.PacketConn) {
	s.readLoop(func(b []byte) (int, bool, net.Addr, error) {
		n, cm, src, err := pc.ReadFrom(b)
		return n, cm != nil && cm.TTL == gtsmTTL, src, err
	})
}

func (s *Server) read6(pc *ipv6.PacketConn) {
	s.readLoop(func(b []byte) (int, bool, net.Addr, error) {
		n, cm, src, err := pc.ReadFrom(b)
		return n, cm != nil && cm.HopLimit == gtsmTTL, src, err
	})
}

// readLoop delivers what read returns (its bool: the TTL was 255) until
// the listener is closed.
func (s *Server) readLoop(read func([]byte) (int, bool, net.Addr, error)) {
	buf := make([]byte, 512)
	for {
		n, gtsm, src, err := read(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		s.deliver(buf[:n], src, gtsm)
	}
}

// deliver hands a received packet to the session of its source address
// (Your Discriminator is checked by the session: one session per peer
// address, so the address selects it even when the field is zero).
func (s *Server) deliver(b []byte, src net.Addr, gtsm bool) {
	ua, ok := src.(*net.UDPAddr)
	if !ok {
		return
	}
	s.mu.Lock()
	p := s.peers[ua.AddrPort().Addr().Unmap()]
	s.mu.Unlock()
	if p == nil {
		return
	}
	h := &bfd.BFDHeader{}
	if !gtsm || h.UnmarshalBinary(b) != nil {
		p.mu.Lock()
		p.stats.Discarded++
		p.mu.Unlock()
		return
	}
	select {
	case p.rx <- h:
	default: // the session is behind; BFD tolerates a lost packet
	}
}

// sender opens the session's sending socket: bound to a free port of
// RFC 5881's range (on local, if given; free-bind, so an address not yet
// up is no error), TTL 255, not connected (a peer without a route yet is
// a send error, not a failed Add).
func sender(addr, local netip.Addr) (*net.UDPConn, error) {
	network, ip := "udp4", "0.0.0.0"
	if addr.Is6() {
		network, ip = "udp6", "::"
	}
	if local.IsValid() {
		ip = local.Unmap().String()
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error { return freeBind(c, addr.Is6()) }}
	var err error
	for range 32 {
		port := srcPortMin + rand.IntN(srcPortMax-srcPortMin+1)
		var c net.PacketConn
		c, err = lc.ListenPacket(context.Background(), network, net.JoinHostPort(ip, fmt.Sprint(port)))
		if err != nil {
			continue
		}
		uc := c.(*net.UDPConn)
		if addr.Is4() {
			err = ipv4.NewConn(uc).SetTTL(gtsmTTL)
		} else {
			err = ipv6.NewConn(uc).SetHopLimit(gtsmTTL)
		}
		if err != nil {
			uc.Close()
			return nil, fmt.Errorf("bfd: setting TTL 255 for %s: %w", addr, err)
		}
		return uc, nil
	}
	return nil, fmt.Errorf("bfd: no free source port for %s: %w", addr, err)
}

// run is one session's loop: periodic packets with jitter, received
// packets, the detection time, timer changes.
func (s *Server) run(p *peer) {
	defer p.conn.Close()
	l := &loop{srv: s, p: p, dst: &net.UDPAddr{IP: p.addr.AsSlice(), Zone: p.addr.Zone(), Port: Port},
		tx: time.NewTimer(0), detect: time.NewTimer(time.Hour)}
	defer l.tx.Stop()
	defer l.detect.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-l.tx.C:
			l.send(false)
			l.schedule(l.interval())
		case h := <-p.rx:
			p.mu.Lock()
			c, err := p.s.Receive(s.now(), h)
			if err != nil {
				p.stats.Discarded++
			} else {
				p.stats.Received++
			}
			p.mu.Unlock()
			if err == nil {
				l.apply(c, h)
			}
		case <-l.detect.C:
			p.mu.Lock()
			c := p.s.Check(s.now())
			p.mu.Unlock()
			l.apply(c, nil)
		case cfg := <-p.cfg:
			p.mu.Lock()
			p.s.SetConfig(cfg)
			p.mu.Unlock()
			l.apply(fsm.Change{Reply: true}, nil)
		case on := <-p.enable:
			p.mu.Lock()
			c := p.s.SetEnabled(on)
			p.mu.Unlock()
			l.apply(c, nil)
		}
	}
}

// loop is run's state: the session's timers and where it sends.
type loop struct {
	srv        *Server
	p          *peer
	dst        *net.UDPAddr
	tx, detect *time.Timer
	nextTx     time.Time // when tx fires
}

func (l *loop) send(final bool) {
	p := l.p
	p.mu.Lock()
	if !p.s.Sending() {
		p.mu.Unlock()
		return
	}
	b, _ := p.s.Packet(final).MarshalBinary()
	p.mu.Unlock()
	_, err := p.conn.WriteToUDP(b, l.dst)
	p.mu.Lock()
	if err != nil {
		p.stats.SendErrors++
	} else {
		p.stats.Sent++
	}
	p.mu.Unlock()
}

func (l *loop) schedule(after time.Duration) {
	l.tx.Reset(after)
	l.nextTx = l.srv.now().Add(after)
}

// interval is the next periodic packet's, jittered.
func (l *loop) interval() time.Duration {
	l.p.mu.Lock()
	iv, mult := l.p.s.TxInterval(), l.p.s.Config().DetectMult
	l.p.mu.Unlock()
	if iv == 0 {
		return fsm.SlowTx // the remote wants none; look again later
	}
	return jitter(iv, mult)
}

// apply acts on a change, made by the received packet h or (nil) by a
// timer: the reply, the owner's events, the timers.
func (l *loop) apply(c fsm.Change, h *bfd.BFDHeader) {
	p := l.p
	if c.Reply {
		l.send(c.Final)
	}
	if c.Changed() || c.Failure {
		attrs := []any{"peer", p.addr, "from", c.From.String(), "to", c.To.String(), "failure", c.Failure}
		if h != nil { // what the remote said: which of its sessions, and why
			attrs = append(attrs, "remoteState", h.State.String(), "remoteDiag", h.Diagnostic.String(),
				"remoteDiscr", h.MyDiscriminator, "yourDiscr", h.YourDiscriminator)
		}
		p.mu.Lock()
		held := p.s.Held()
		p.mu.Unlock()
		if !held.IsZero() && c.From == bfd.StateUp {
			attrs = append(attrs, "failureIfNotUpWithin", held.Sub(l.srv.now()).Round(time.Millisecond))
		}
		l.srv.log.Info("BFD session changed state", attrs...)
		if c.Failure && p.ev.Failure != nil {
			p.ev.Failure()
			l.schedule(l.interval()) // the Down after what Failure sent
		}
		if p.ev.Changed != nil {
			p.ev.Changed()
		}
	}
	// A faster rate (Up, or the remote's RequiredMinRx) starts now, not
	// after a packet interval of the slow rate: the remote's detection
	// time is already running at the fast one.
	if iv := l.interval(); l.srv.now().Add(iv).Before(l.nextTx) {
		l.schedule(iv)
	}
	p.mu.Lock()
	d := p.s.Deadline()
	p.mu.Unlock()
	if d.IsZero() {
		l.detect.Stop()
	} else {
		l.detect.Reset(d.Sub(l.srv.now()))
	}
}

// jitter shortens a periodic interval by 0–25% (RFC 5880 §6.8.7; 10–25%
// when Detect Mult is 1, so two packets never fall in one detection
// time).
func jitter(iv time.Duration, mult uint8) time.Duration {
	lo, hi := 0.75, 1.0
	if mult == 1 {
		hi = 0.9
	}
	return time.Duration(float64(iv) * (lo + rand.Float64()*(hi-lo)))
}
