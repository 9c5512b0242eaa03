package responder

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mdlayher/packet"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/utils/clock"
)

// ErrUnsupported is returned by Run on systems without AF_PACKET sockets.
var ErrUnsupported = errors.New("responder: raw ARP/NDP sockets need Linux")

// Config tunes a Manager. The zero value is valid: every field has a default.
type Config struct {
	// GratuitousCount is how many gratuitous ARP pairs / unsolicited NAs are
	// sent for an address newly owned on an interface; default 5. The first
	// goes out at once (the takeover is never delayed); the repeats cover a
	// lost frame and clients that were busy, like MetalLB's 5 s of them.
	GratuitousCount int
	// GratuitousInterval is the gap before the first repeat; each later gap
	// doubles. Default 200ms: with 5 rounds they leave at 0, 0.2, 0.6, 1.4
	// and 3.0 s after the takeover.
	GratuitousInterval time.Duration
	// RetryInterval is how often an interface whose listeners failed to open
	// is tried again (the link may not exist yet, or IPv6 may still be
	// doing DAD); default 1s.
	RetryInterval time.Duration
	// Clock drives the gratuitous schedule and retries; the real clock if nil.
	Clock clock.Clock
	// Silent, when set, is asked before every reply and announcement: while
	// it returns true nothing is sent (the agent's table may be stale: it
	// has just resumed from a stall, internal/agent handoff.go).
	Silent func() bool
}

// Validate reports a field that is out of range.
func (c Config) Validate() error {
	if c.GratuitousCount < 0 {
		return fmt.Errorf("responder: GratuitousCount %d: want >= 0 (0 means the default)", c.GratuitousCount)
	}
	if c.GratuitousInterval < 0 || c.RetryInterval < 0 {
		return errors.New("responder: GratuitousInterval and RetryInterval must not be negative")
	}
	return nil
}

func (c Config) withDefaults() Config {
	if c.GratuitousCount == 0 {
		c.GratuitousCount = 5
	}
	if c.GratuitousInterval == 0 {
		c.GratuitousInterval = 200 * time.Millisecond
	}
	if c.RetryInterval == 0 {
		c.RetryInterval = time.Second
	}
	if c.Clock == nil {
		c.Clock = clock.RealClock{}
	}
	return c
}

// GroupConn is the seam between the Manager and a raw socket: a
// net.PacketConn (frames in and out; WriteTo gets a *packet.Addr with the
// destination MAC) that can also accept a link-layer multicast group.
// *packet.Conn satisfies it; tests pass a fake.
type GroupConn interface {
	net.PacketConn
	JoinGroup(net.HardwareAddr) error
	LeaveGroup(net.HardwareAddr) error
}

// Link is one interface's pair of listeners, as an opener returns it.
type Link struct {
	Index int
	Name  string
	MAC   net.HardwareAddr
	ARP   GroupConn // bound to ARP frames
	NDP   GroupConn // bound to IPv6 frames, filtered to neighbour solicitations
}

// Opener opens the listeners of the interface with the given index. It runs
// on Run's goroutine, so sockets are created in that thread's network
// namespace.
type Opener func(ifindex int) (*Link, error)

// Manager converges raw-socket listeners to a desired table of owned
// addresses per interface: it answers ARP and NDP for them and announces
// newly owned ones. Apply may be called from any goroutine; Run does the work.
type Manager struct {
	cfg  Config
	log  *slog.Logger
	met  *metrics
	open Opener

	mu      sync.Mutex
	desired map[int]map[netip.Addr]struct{} // normalised (toSet)
	// claims are the desired addresses answered with another MAC
	// (Change.Claim); Apply clears them.
	claims map[int]map[netip.Addr]net.HardwareAddr
	// full is set by Apply until Run takes the table; otherwise delta holds
	// the addresses Update changed since Run last looked, by interface
	// (true: answer), so Run touches only those.
	full  bool
	delta map[int]map[netip.Addr]bool
	again []announcement // Reannounce requests not yet taken by Run
	kick  chan struct{}
	// openErr is the last failure to open a desired interface, nil once
	// every desired interface is open (Healthy).
	openErr atomic.Pointer[error]
	// unanswered are the desired interfaces that are not open, with why
	// (unanswered.go); unansweredc is poked when they change.
	unanswered  map[int]string
	unansweredc chan struct{}
}

// Healthy returns nil when every interface of the table is open and
// answering, else why not (it is retried every RetryInterval).
func (m *Manager) Healthy() error {
	if p := m.openErr.Load(); p != nil {
		return *p
	}
	return nil
}

// New returns a Manager that opens real AF_PACKET sockets. The process (at
// least the goroutine calling Run and the threads it runs on) must be inside
// the network namespace whose interfaces the table names: the agent runs one
// process per node. cfg must be valid (Validate); out-of-range fields fall
// back to defaults.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) *Manager {
	return NewWithOpener(cfg, log, reg, openLink)
}

// NewWithOpener is New with a custom Opener: for tests, or to open sockets
// somewhere else (e.g. on a thread that is inside the target namespace,
// which lets one process serve several namespaces; the sockets may then be
// used from any thread).
func NewWithOpener(cfg Config, log *slog.Logger, reg prometheus.Registerer, open Opener) *Manager {
	// Out-of-range values (Validate) fall back to their defaults.
	cfg.GratuitousCount = max(cfg.GratuitousCount, 0)
	cfg.GratuitousInterval = max(cfg.GratuitousInterval, 0)
	cfg.RetryInterval = max(cfg.RetryInterval, 0)
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Manager{
		cfg:     cfg.withDefaults(),
		log:     log,
		met:     newMetrics(reg),
		open:    open,
		desired: map[int]map[netip.Addr]struct{}{},
		delta:   map[int]map[netip.Addr]bool{},
		kick:    make(chan struct{}, 1),

		unansweredc: make(chan struct{}, 1),
	}
}

// Apply replaces the desired table: for each interface index, the addresses
// it must answer for. Listeners exist exactly for the interfaces with at
// least one address; the others are closed. Apply never blocks: Run
// converges asynchronously, and calls in quick succession coalesce (only the
// latest table counts, so an address removed and re-added before Run sees
// the removal is not announced again).
func (m *Manager) Apply(desired map[int][]netip.Addr) {
	table := make(map[int]map[netip.Addr]struct{}, len(desired))
	for ifindex, addrs := range desired {
		if set := toSet(addrs); len(set) > 0 {
			table[ifindex] = set
		}
	}
	m.mu.Lock()
	m.desired, m.full, m.delta, m.claims = table, true, map[int]map[netip.Addr]bool{}, nil
	m.mu.Unlock()
	m.poke()
}

// Change is one address to answer for (On) or no longer answer for on one
// interface. Claim, with On, is the MAC to answer with instead of the
// interface's own: another node's, while this node hands the address over
// to it (make before break: both answers then name the same MAC). An
// address answered with a Claim is not announced; a Change without one
// returns to the interface's own MAC (call Reannounce to tell clients).
type Change struct {
	IfIndex int
	Addr    netip.Addr
	On      bool
	Claim   net.HardwareAddr
}

// Update changes the desired table by the given entries and leaves the
// rest as it is: Run then touches only the addresses named, so its cost
// follows the changes, not the table (10,000 addresses). Like Apply it
// never blocks and coalesces.
func (m *Manager) Update(changes []Change) {
	if len(changes) == 0 {
		return
	}
	m.mu.Lock()
	for _, c := range changes {
		a := c.Addr.Unmap().WithZone("")
		if !valid(a) {
			continue
		}
		set := m.desired[c.IfIndex]
		if c.On {
			if set == nil {
				set = map[netip.Addr]struct{}{}
				m.desired[c.IfIndex] = set
			}
			set[a] = struct{}{}
		} else {
			delete(set, a)
			if len(set) == 0 {
				delete(m.desired, c.IfIndex)
			}
		}
		m.setClaim(c.IfIndex, a, c.On, c.Claim)
		if !m.full {
			d := m.delta[c.IfIndex]
			if d == nil {
				d = map[netip.Addr]bool{}
				m.delta[c.IfIndex] = d
			}
			d[a] = c.On
		}
	}
	m.mu.Unlock()
	m.poke()
}

// setClaim records the desired claim of a (under m.mu).
func (m *Manager) setClaim(ifindex int, a netip.Addr, on bool, mac net.HardwareAddr) {
	if on && len(mac) == 6 {
		if m.claims == nil {
			m.claims = map[int]map[netip.Addr]net.HardwareAddr{}
		}
		if m.claims[ifindex] == nil {
			m.claims[ifindex] = map[netip.Addr]net.HardwareAddr{}
		}
		m.claims[ifindex][a] = slices.Clone(mac)
		return
	}
	delete(m.claims[ifindex], a)
	if len(m.claims[ifindex]) == 0 {
		delete(m.claims, ifindex)
	}
}

// claimsOf copies the desired claims on ifindex.
func (m *Manager) claimsOf(ifindex int) map[netip.Addr]net.HardwareAddr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.claims[ifindex])
}

// claimOf returns the desired claim of a on ifindex (nil: none).
func (m *Manager) claimOf(ifindex int, a netip.Addr) net.HardwareAddr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.claims[ifindex][a]
}

func (m *Manager) poke() {
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Reannounce sends addr's gratuitous series (the takeover schedule:
// GratuitousCount rounds from now) again on the interface, if the Manager
// answers for it there; otherwise the request is dropped. It restarts a
// series already under way rather than adding a second one. The agent calls
// it when a split brain begins or ends, so that clients that learned another
// node's MAC for the address are pointed back here. It never blocks.
func (m *Manager) Reannounce(ifindex int, addr netip.Addr) {
	m.mu.Lock()
	m.again = append(m.again, announcement{ifindex: ifindex, addr: addr.Unmap().WithZone("")})
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

func (m *Manager) takeAgain() []announcement {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := m.again
	m.again = nil
	return out
}

// table copies the desired table.
func (m *Manager) table() map[int]map[netip.Addr]struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[int]map[netip.Addr]struct{}, len(m.desired))
	for ifindex, set := range m.desired {
		out[ifindex] = maps.Clone(set)
	}
	return out
}

// tableOf copies the desired addresses of one interface.
func (m *Manager) tableOf(ifindex int) map[netip.Addr]struct{} {
	m.mu.Lock()
	defer m.mu.Unlock()
	return maps.Clone(m.desired[ifindex])
}

// take returns what changed since the last call: the whole table after
// an Apply (nil delta), else the addresses Update changed.
func (m *Manager) take() (map[int]map[netip.Addr]struct{}, map[int]map[netip.Addr]bool) {
	m.mu.Lock()
	full, delta := m.full, m.delta
	m.full, m.delta = false, map[int]map[netip.Addr]bool{}
	m.mu.Unlock()
	if full {
		return m.table(), nil
	}
	return nil, delta
}

// Run opens and closes listeners as Apply asks, answers requests and sends
// announcements, until ctx ends; then it closes every socket, waits for its
// goroutines and returns nil. Call it once. Errors opening an interface are logged, counted
// and retried; they do not end Run.
func (m *Manager) Run(ctx context.Context) error {
	s := &runState{m: m, links: map[int]*link{}}
	defer s.closeAll()
	for {
		var timer <-chan time.Time
		if wait, ok := s.nextWake(); ok {
			timer = m.cfg.Clock.After(wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
			s.converge()
			s.again(m.takeAgain())
		case <-timer:
			if s.retryDue() {
				s.reconcile(m.table())
			}
			s.sendDue()
		}
		s.noteUnanswered()
	}
}

// runState is owned by Run's goroutine.
type runState struct {
	m       *Manager
	links   map[int]*link
	pending []announcement
	retryAt time.Time // zero: nothing to retry
	wg      sync.WaitGroup
	// openErrs is the last failure to open each interface not open yet.
	openErrs map[int]string
}

// announcement is a scheduled series of gratuitous frames for one address.
type announcement struct {
	ifindex int
	addr    netip.Addr
	left    int
	due     time.Time
	gap     time.Duration // before the next round; doubles
}

// converge brings the links to the table: all of it after an Apply, only
// the addresses updated since otherwise.
func (s *runState) converge() {
	if table, delta := s.m.take(); delta == nil {
		s.reconcile(table)
	} else {
		s.update(delta)
	}
}

// update applies the addresses Update changed. An interface not open yet
// is opened with its whole table; one left with nothing is closed.
func (s *runState) update(delta map[int]map[netip.Addr]bool) {
	m := s.m
	for _, ifindex := range slices.Sorted(maps.Keys(delta)) {
		l, ok := s.links[ifindex]
		if !ok {
			if set := m.tableOf(ifindex); len(set) > 0 {
				s.openWith(ifindex, set)
			}
			continue
		}
		// Additions first: an address leaving with another of the same
		// solicited-node group arriving keeps the group joined throughout.
		var added []netip.Addr
		for a, on := range delta[ifindex] {
			if !on {
				continue
			}
			claim := m.claimOf(ifindex, a)
			if l.addClaimed(a, claim) && claim == nil {
				added = append(added, a)
			}
		}
		for a, on := range delta[ifindex] {
			if !on {
				l.remove(a)
			}
		}
		slices.SortFunc(added, netip.Addr.Compare)
		s.schedule(ifindex, added)
		if l.size() == 0 {
			s.release(ifindex, l)
		} else if len(l.groups) != len(l.joined) && s.retryAt.IsZero() {
			// A group join failed: the retry's reconcile joins again
			// (setOwned), as it does after an open failure.
			s.retryAt = m.cfg.Clock.Now().Add(m.cfg.RetryInterval)
		}
	}
	m.met.interfaces.Set(float64(len(s.links)))
	s.sendDue()
}

func (s *runState) release(ifindex int, l *link) {
	l.close()
	delete(s.links, ifindex)
	s.m.log.Info("interface released", "ifindex", ifindex, "interface", l.Name)
}

// openWith opens an interface and answers for set on it; a failure is
// retried by the next reconcile (retryAt) and returned.
func (s *runState) openWith(ifindex int, set map[netip.Addr]struct{}) error {
	m := s.m
	l, err := s.openLink(ifindex)
	if err != nil {
		m.met.errors.WithLabelValues("open").Inc()
		m.log.Error("cannot open listeners; will retry", "ifindex", ifindex,
			"retry", m.cfg.RetryInterval, "err", err)
		s.retryAt = m.cfg.Clock.Now().Add(m.cfg.RetryInterval)
		m.openErr.Store(&err)
		if s.openErrs == nil {
			s.openErrs = map[int]string{}
		}
		s.openErrs[ifindex] = err.Error()
		return err
	}
	delete(s.openErrs, ifindex)
	s.links[ifindex] = l
	s.schedule(ifindex, l.setOwned(set, s.m.claimsOf(ifindex)))
	return nil
}

// schedule starts the gratuitous series of newly owned addresses.
func (s *runState) schedule(ifindex int, added []netip.Addr) {
	for _, a := range added {
		s.pending = append(s.pending, announcement{
			ifindex: ifindex, addr: a, left: s.m.cfg.GratuitousCount, due: s.m.cfg.Clock.Now(), gap: s.m.cfg.GratuitousInterval,
		})
	}
}

func (s *runState) nextWake() (time.Duration, bool) {
	var next time.Time
	for _, a := range s.pending {
		if next.IsZero() || a.due.Before(next) {
			next = a.due
		}
	}
	if !s.retryAt.IsZero() && (next.IsZero() || s.retryAt.Before(next)) {
		next = s.retryAt
	}
	if next.IsZero() {
		return 0, false
	}
	return max(0, next.Sub(s.m.cfg.Clock.Now())), true
}

func (s *runState) retryDue() bool {
	return !s.retryAt.IsZero() && !s.m.cfg.Clock.Now().Before(s.retryAt)
}

// reconcile opens, updates and closes links to match the table. An
// interface with no (valid) addresses needs no listener and is closed.
func (s *runState) reconcile(table map[int]map[netip.Addr]struct{}) {
	m := s.m
	s.retryAt = time.Time{}
	var openErr error
	defer func() {
		if openErr == nil {
			m.openErr.Store(nil)
		} else {
			m.openErr.Store(&openErr)
		}
	}()
	for ifindex, l := range s.links {
		if len(table[ifindex]) == 0 {
			s.release(ifindex, l)
		}
	}
	for _, ifindex := range slices.Sorted(maps.Keys(table)) {
		set := table[ifindex]
		if len(set) == 0 {
			continue
		}
		if l, ok := s.links[ifindex]; ok {
			s.schedule(ifindex, l.setOwned(set, m.claimsOf(ifindex)))
		} else if err := s.openWith(ifindex, set); err != nil {
			openErr = err
		}
	}
	m.met.interfaces.Set(float64(len(s.links)))
	s.sendDue()
}

// again (re)starts the gratuitous series of each requested address that a
// link owns, replacing a series already pending for it.
func (s *runState) again(reqs []announcement) {
	if len(reqs) == 0 {
		return
	}
	now := s.m.cfg.Clock.Now()
	for _, r := range reqs {
		if l, ok := s.links[r.ifindex]; !ok || !l.owns(r.addr) {
			continue
		}
		s.pending = slices.DeleteFunc(s.pending, func(a announcement) bool {
			return a.ifindex == r.ifindex && a.addr == r.addr
		})
		r.left, r.due, r.gap = s.m.cfg.GratuitousCount, now, s.m.cfg.GratuitousInterval
		s.pending = append(s.pending, r)
	}
	s.sendDue()
}

func (s *runState) openLink(ifindex int) (*link, error) {
	pl, err := s.m.open(ifindex)
	if err != nil {
		return nil, err
	}
	if len(pl.MAC) != 6 {
		_ = pl.ARP.Close()
		_ = pl.NDP.Close()
		return nil, fmt.Errorf("responder: interface %d (%s) has hardware address %q: only Ethernet is supported",
			ifindex, pl.Name, pl.MAC)
	}
	l := newLink(pl, s.m.met, s.m.cfg.Clock, s.m.log)
	l.silent = s.m.cfg.Silent
	s.wg.Add(2)
	go func() { defer s.wg.Done(); l.serve(l.ARP, familyIPv4, HandleARPClaims) }()
	go func() { defer s.wg.Done(); l.serve(l.NDP, familyIPv6, HandleNDPClaims) }()
	s.m.log.Info("interface opened", "ifindex", ifindex, "interface", pl.Name, "mac", pl.MAC.String())
	return l, nil
}

// manyAnnounced is how many addresses in one gratuitous round make the
// responder log the round's time at debug level.
const manyAnnounced = 100

// sendDue sends every announcement whose time has come (announceRound)
// and reschedules the repeats. An address no longer owned on that
// interface is dropped.
func (s *runState) sendDue() {
	now := s.m.cfg.Clock.Now()
	kept := s.pending[:0]
	var due []announcement
	for _, a := range s.pending {
		l, ok := s.links[a.ifindex]
		if !ok || !l.owns(a.addr) {
			continue
		}
		if a.due.After(now) {
			kept = append(kept, a)
			continue
		}
		due = append(due, a)
	}
	s.announceRound(due)
	for _, a := range due {
		if a.left--; a.left > 0 {
			a.due = now.Add(a.gap)
			a.gap *= 2
			kept = append(kept, a)
		}
	}
	clear(s.pending[len(kept):])
	s.pending = kept
	if len(due) >= manyAnnounced {
		s.m.log.Debug("gratuitous round sent", "addresses", len(due), "took", s.m.cfg.Clock.Since(now).Round(time.Millisecond))
	}
}

// announceRound sends one round of gratuitous frames for due. A node loss
// at thousands of Services moves thousands of addresses at once, and each
// frame costs a write (on a lab bridge, also every receiver's ARP
// processing: 200-450 ms for 1,700 addresses on a loaded 2-core machine).
// So the round goes out in the order that gets every address its first
// frame soonest: the first frame of every address before any second one
// (the second ARP form serves hosts that take only that form), IPv4 and
// IPv6 alternating (the two families of a dual-stack Service move
// together, and neither waits behind all of the other), and each family's
// addresses in a random order: in address order the same Services (the
// highest addresses) went out last at every takeover, ~half a round after
// the average one; shuffled, every address waits half a round on average
// and none is last every time.
func (s *runState) announceRound(due []announcement) {
	type out struct {
		l      *link
		a      netip.Addr
		conn   GroupConn
		fam    string
		frames [][]byte
	}
	var v4, v6 []out
	for _, d := range due {
		l := s.links[d.ifindex]
		frames, conn, fam := l.announcement(d.addr)
		if frames == nil {
			continue
		}
		o := out{l: l, a: d.addr, conn: conn, fam: fam, frames: frames}
		if d.addr.Is4() {
			v4 = append(v4, o)
		} else {
			v6 = append(v6, o)
		}
	}
	rand.Shuffle(len(v4), func(i, j int) { v4[i], v4[j] = v4[j], v4[i] })
	rand.Shuffle(len(v6), func(i, j int) { v6[i], v6[j] = v6[j], v6[i] })
	order := make([]out, 0, len(v4)+len(v6))
	for i := range max(len(v4), len(v6)) {
		if i < len(v4) {
			order = append(order, v4[i])
		}
		if i < len(v6) {
			order = append(order, v6[i])
		}
	}
	for pass := 0; ; pass++ {
		sent := false
		for _, o := range order {
			if pass < len(o.frames) {
				o.l.send(o.conn, o.fam, o.a, o.frames[pass])
				sent = true
			}
		}
		if !sent {
			return
		}
	}
}

func (s *runState) closeAll() {
	for ifindex, l := range s.links {
		l.close()
		delete(s.links, ifindex)
	}
	s.wg.Wait()
	s.m.met.interfaces.Set(0)
}

// toSet normalises addresses (IPv4-mapped to IPv4, zones dropped, invalid
// ones skipped).
func toSet(addrs []netip.Addr) map[netip.Addr]struct{} {
	set := make(map[netip.Addr]struct{}, len(addrs))
	for _, a := range addrs {
		if a = a.Unmap().WithZone(""); valid(a) {
			set[a] = struct{}{}
		}
	}
	return set
}

// valid reports whether a normalised address can be answered for.
func valid(a netip.Addr) bool { return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() }

// hwAddr wraps a destination MAC for GroupConn.WriteTo.
func hwAddr(frame []byte) net.Addr {
	return &packet.Addr{HardwareAddr: net.HardwareAddr(frame[0:6])}
}
