package membership

import (
	"context"
	"fmt"
	"log"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/prometheus/client_golang/prometheus"
)

// metaLeaving is the node metadata older agents gossip just before a
// graceful Leave (newer ones set NodeMeta.Leaving), so that peers can count
// the departure as a leave, not a failure (memberlist's EventDelegate does
// not say which it was).
const metaLeaving = "leaving"

// Membership is one member of the agents' gossip cluster.
type Membership struct {
	cfg Config
	log *slog.Logger
	met *metrics

	changes  chan struct{}
	kick     chan struct{}
	metaKick chan struct{} // SetMeta: broadcast the new metadata
	holdKick chan struct{} // a member was held (hold.go)
	// crash, when closed, makes Run stop without leaving: the tests' hard
	// node loss.
	crash     chan struct{}
	crashOnce sync.Once

	mu      sync.Mutex
	peers   []string
	named   map[string][]string // SetNodePeers: node name -> its addresses
	live    map[string]string   // name -> address, from the event delegate
	metas   map[string][]byte   // name -> its metadata, as last gossiped
	leaving map[string]bool     // names that announced a graceful leave
	held    map[string]*held    // failed members whose node still answers (hold.go)
	// unreachable: dropped after AgentLossTimeout while their node still
	// answered (hold.go, Unreachable).
	unreachable map[string]*held
	// suspects: members this member's probe found failing; early: those
	// dropped because their node did not answer either (suspect.go).
	suspects, early map[string]*held
	// lastGap is when holdLoop's beat last came late: this agent did not
	// run on time (suspect.go: early drops are not trusted around it).
	lastGap time.Time
	addr    string // our advertised address once running

	// took: peers whose took message (took.go) arrived before their
	// metadata cleared Taking, with the Since it named.
	took   map[string]int64
	sender atomic.Pointer[senderBox] // the running memberlist (Took), nil outside Run

	meta atomic.Value // []byte: our own node metadata (SetMeta)
	// metaSeq counts SetMeta's changes; repeatSeq and repeatN are the
	// change whose repeats publishMeta has scheduled and how many (under
	// mu). repeats are the pauses before each (metaRepeats).
	metaSeq, repeatSeq uint64
	repeatN            int
	repeats            []time.Duration
	// transport replaces memberlist's own UDP/TCP transport (nil: its
	// own); tests set it to lose packets.
	transport memberlist.Transport
	// merging: members a join's state named alive that have not joined
	// yet (merge, Settled).
	merging map[string]bool
	// gossiped is our own metadata as gossip's state holds it (under mu):
	// what peers learn from us, which lags meta until UpdateNode took it.
	gossiped []byte
	gen      atomic.Uint64 // Generation
}

// New validates cfg and prepares a member; nothing listens until Run.
func New(cfg Config, logger *slog.Logger, reg prometheus.Registerer) (*Membership, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	m := &Membership{
		cfg:      cfg.withDefaults(),
		log:      logger,
		met:      newMetrics(reg),
		changes:  make(chan struct{}, 1),
		kick:     make(chan struct{}, 1),
		metaKick: make(chan struct{}, 1),
		holdKick: make(chan struct{}, 1),
		crash:    make(chan struct{}),
		live:     map[string]string{},
		metas:    map[string][]byte{},
		leaving:  map[string]bool{},
		held:     map[string]*held{},

		unreachable: map[string]*held{},
		suspects:    map[string]*held{},
		early:       map[string]*held{},
		took:        map[string]int64{},
	}
	m.meta.Store([]byte(nil))
	m.repeats = metaRepeats
	return m, nil
}

// SetPeers replaces the addresses ("host" or "host:port"; the port defaults
// to BindPort) that Run keeps joining while they are not live members. The
// agent feeds it from Node objects; once joined, membership needs no API
// server.
func (m *Membership) SetPeers(addrs []string) {
	peers := make([]string, 0, len(addrs))
	for _, a := range addrs {
		if a != "" {
			peers = append(peers, normalizePeer(a, m.cfg.BindPort))
		}
	}
	slices.Sort(peers)
	m.mu.Lock()
	m.peers = slices.Compact(peers)
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// SetNodePeers replaces the peers by node name, each with its addresses
// ("host" or "host:port"): a node is joined only while no member of that
// name is live, and at the addresses of this member's own family when it
// has any, so that a dual-stack node is not re-joined at its other address
// forever. It replaces what SetPeers set.
func (m *Membership) SetNodePeers(peers map[string][]string) {
	named := make(map[string][]string, len(peers))
	for name, addrs := range peers {
		for _, a := range addrs {
			if a != "" {
				named[name] = append(named[name], normalizePeer(a, m.cfg.BindPort))
			}
		}
	}
	m.mu.Lock()
	m.named, m.peers = named, nil
	m.mu.Unlock()
	select {
	case m.kick <- struct{}{}:
	default:
	}
}

// Members returns the names of the live members (this one included),
// sorted. Suspect members still count as live until declared dead.
func (m *Membership) Members() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Sorted(maps.Keys(m.live))
}

// Generation changes after every change Changes announces (a join, leave,
// failure or new metadata): a reader can skip work when it has not.
func (m *Membership) Generation() uint64 { return m.gen.Load() }

// Changes delivers one (coalesced) notification after any join, leave or
// failure; read Members afterwards.
func (m *Membership) Changes() <-chan struct{} { return m.changes }

// Addr is the address peers reach this member at ("ip:port"), known once
// Run has started listening; "" before.
func (m *Membership) Addr() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.addr
}

// Run joins the cluster and keeps rejoining configured peers that are not
// members, until ctx ends; then it leaves gracefully (right for a rolling
// restart: peers drop us at once instead of after failure detection) and
// shuts down. It returns an error only if it cannot start listening.
func (m *Membership) Run(ctx context.Context) error {
	mc, err := m.memberlistConfig()
	if err != nil {
		return err
	}
	ml, err := memberlist.Create(mc)
	if err != nil {
		return fmt.Errorf("membership: starting memberlist on %s:%d: %w", m.cfg.BindAddr, m.cfg.BindPort, err)
	}
	local := ml.LocalNode()
	m.sender.Store(&senderBox{ml})
	defer m.sender.Store(nil)
	m.mu.Lock()
	m.addr = local.Address()
	m.mu.Unlock()
	m.log.Info("gossip started", "node", local.Name, "addr", local.Address())
	if m.cfg.Insecure {
		m.met.insecure.Set(1)
		m.log.Warn("gossip runs WITHOUT a key (--insecure-gossip): anyone who reaches " + local.Address() + " can join, claim a node's addresses and spread false deaths; " +
			"give the agents a key instead (--gossip-key-file, the Secret mooring-gossip-key: docs/install.md#gossip-key)")
	}

	var wg sync.WaitGroup
	joining := make(chan struct{}, 1) // one join attempt at a time
	graceful := true
	loopCtx, stopLoops := context.WithCancel(ctx)
	defer func() {
		stopLoops()
		wg.Wait()
		m.stop(ml, graceful)
	}()
	wg.Go(func() { m.holdLoop(loopCtx) })
	wg.Go(func() { m.ringLoop(loopCtx, ml) })
	if m.cfg.KeyFile != "" {
		wg.Go(func() { m.keyLoop(loopCtx, mc.Keyring) })
	}
	tick := time.NewTicker(m.cfg.RejoinInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-m.crash:
			graceful = false
			return nil
		case <-m.metaKick:
			m.publishMeta(ml)
			continue
		case <-m.kick:
		case <-tick.C:
		}
		missing := m.missingPeers()
		if len(missing) == 0 {
			continue
		}
		select {
		case joining <- struct{}{}:
		default:
			continue // the previous attempt is still dialling
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-joining }()
			n, err := ml.Join(missing)
			if err != nil {
				m.log.Debug("join attempt incomplete", "peers", missing, "joined", n, "err", err)
			}
		}()
	}
}

// missingPeers lists configured peers that are neither us nor a live member.
// A held member (hold.go) counts as missing: gossip declared it dead, and
// joining it is how it learns so and refutes once its agent runs again
// (the dead message's retransmissions may be long over by then).
// It reads our own copy of the live set: the *Node values memberlist's
// Members returns are mutated under its lock while we would read them.
func (m *Membership) missingPeers() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	have := map[string]bool{m.addr: true}
	for name, a := range m.live {
		if m.held[name] == nil {
			have[a] = true
		}
	}
	var missing []string
	for _, p := range m.peers {
		if !have[p] {
			missing = append(missing, p)
		}
	}
	self := netip.IPv4Unspecified()
	if ap, err := netip.ParseAddrPort(m.addr); err == nil {
		self = ap.Addr()
	}
	for name, addrs := range m.named {
		if _, live := m.live[name]; live && m.held[name] == nil || name == m.cfg.NodeName {
			continue
		}
		same := slices.DeleteFunc(slices.Clone(addrs), func(a string) bool {
			ap, err := netip.ParseAddrPort(a)
			return err != nil || ap.Addr().Is4() != self.Is4()
		})
		if len(same) == 0 {
			same = addrs
		}
		missing = append(missing, same...)
	}
	slices.Sort(missing)
	return missing
}

// stop announces the departure as metadata, leaves gracefully (unless
// crashing) and shuts down. Errors are logged: a failed leave only means
// peers detect us as failed instead.
func (m *Membership) stop(ml *memberlist.Memberlist, graceful bool) {
	if graceful {
		meta, _ := DecodeNodeMeta(m.meta.Load().([]byte))
		meta.Leaving = true
		if b, err := meta.Encode(); err == nil {
			m.meta.Store(b)
		}
		if err := ml.UpdateNode(m.cfg.LeaveTimeout); err != nil {
			m.log.Warn("announcing leave", "err", err)
		}
		if err := ml.Leave(m.cfg.LeaveTimeout); err != nil {
			m.log.Warn("leaving gracefully; peers will detect a failure instead", "err", err)
		}
	}
	if err := ml.Shutdown(); err != nil {
		m.log.Warn("shutting down gossip", "err", err)
	}
	m.mu.Lock()
	clear(m.live)
	clear(m.metas)
	clear(m.held)
	clear(m.unreachable)
	clear(m.suspects)
	clear(m.early)
	clear(m.took)
	m.met.held.Set(0)
	m.addr = ""
	m.met.live.Set(0)
	m.mu.Unlock()
	m.log.Info("gossip stopped")
}

func (m *Membership) memberlistConfig() (*memberlist.Config, error) {
	c := memberlist.DefaultLANConfig()
	c.Name = m.cfg.NodeName
	c.BindAddr = m.cfg.BindAddr
	c.BindPort = m.cfg.BindPort
	c.AdvertiseAddr = m.cfg.AdvertiseAddr
	c.AdvertisePort = m.cfg.BindPort
	if m.cfg.AdvertisePort != 0 {
		c.AdvertisePort = m.cfg.AdvertisePort
	}
	c.ProbeInterval = m.cfg.ProbeInterval
	c.ProbeTimeout = m.cfg.ProbeTimeout
	c.GossipInterval = m.cfg.GossipInterval
	// No LZW: memberlist builds a compressor (a 64 KiB table) for every
	// message it sends, ten a second per member at these intervals, to
	// shrink packets of a few hundred bytes on a LAN; that was most of an
	// idle agent's garbage (BenchmarkIdleGossipAlloc). Receivers still
	// take compressed messages, so members of an older release mix.
	c.EnableCompression = false
	c.SuspicionMult = m.cfg.SuspicionMult
	c.TCPTimeout = m.cfg.TCPTimeout
	// Push/pull is the anti-entropy backstop; gossip carries the fast path.
	c.PushPullInterval = 15 * time.Second
	// A node that restarts with a new address under the same name (a
	// rebuilt machine) may take its name back after this long.
	c.DeadNodeReclaimTime = 10 * time.Second
	c.SecretKey = m.cfg.SecretKey
	if m.cfg.KeyFile != "" {
		kr, err := loadKeyring(m.cfg.KeyFile)
		if err != nil {
			return nil, err
		}
		c.Keyring = kr
	}
	if m.transport != nil {
		c.Transport = m.transport
	}
	c.Events = (*events)(m)
	c.Delegate = (*delegate)(m)
	c.Merge = (*merge)(m)
	c.Logger = log.New(&slogWriter{log: m.log, suspect: m.probeFailed}, "", 0)
	return c, nil
}

// events receives memberlist's notifications. memberlist calls it with its
// node lock held, so it must not call back into memberlist.
type events Membership

// NotifyJoin and NotifyLeave update metrics under m.mu, together with the
// live set, so that a reader of Members never sees one without the other.
func (e *events) NotifyJoin(n *memberlist.Node) {
	m := (*Membership)(e)
	m.mu.Lock()
	m.live[n.Name] = n.Address()
	m.metas[n.Name] = slices.Clone(n.Meta)
	if n.Name == m.cfg.NodeName {
		m.gossiped = slices.Clone(n.Meta)
	}
	delete(m.leaving, n.Name)
	delete(m.unreachable, n.Name)
	delete(m.merging, n.Name)
	m.forgetSuspect(n.Name)
	wasHeld := m.unhold(n.Name)
	count := len(m.live)
	if !wasHeld {
		m.met.joins.Inc()
	}
	m.met.live.Set(float64(count))
	m.mu.Unlock()
	if wasHeld {
		m.log.Info("member back after a gossip failure; its node answered all along, nothing moved", "node", n.Name)
	} else {
		m.log.Info("member joined", "node", n.Name, "addr", n.Address(), "live", count)
	}
	m.notify()
}

func (e *events) NotifyLeave(n *memberlist.Node) {
	m := (*Membership)(e)
	meta, _ := DecodeNodeMeta(n.Meta)
	m.mu.Lock()
	graceful := m.leaving[n.Name] || meta.Leaving
	delete(m.leaving, n.Name)
	if m.forgetSuspect(n.Name) { // dropped when its probe failed (suspect.go)
		m.mu.Unlock()
		m.log.Info("gossip confirms a failure the kernel check found early", "node", n.Name)
		return
	}
	if !graceful && m.hold(n) {
		m.mu.Unlock()
		return
	}
	delete(m.live, n.Name)
	delete(m.metas, n.Name)
	delete(m.took, n.Name)
	delete(m.held, n.Name)
	m.met.held.Set(float64(len(m.held)))
	count := len(m.live)
	m.met.live.Set(float64(count))
	if graceful {
		m.met.leaves.Inc()
	} else {
		m.met.failures.Inc()
	}
	m.mu.Unlock()
	if graceful {
		m.log.Info("member left", "node", n.Name, "live", count)
	} else {
		m.log.Warn("member failed", "node", n.Name, "addr", n.Address(), "live", count)
	}
	m.notify()
}

func (e *events) NotifyUpdate(n *memberlist.Node) {
	m := (*Membership)(e)
	meta, err := DecodeNodeMeta(n.Meta)
	m.mu.Lock()
	if n.Name == m.cfg.NodeName {
		m.gossiped = slices.Clone(n.Meta)
	}
	if meta.Leaving {
		m.leaving[n.Name] = true
	}
	if dropped := m.early[n.Name]; dropped != nil {
		dropped.meta = slices.Clone(n.Meta) // dropped early (suspect.go): for its return
	}
	_, live := m.live[n.Name]
	changed := live && string(m.metas[n.Name]) != string(n.Meta)
	if live {
		m.metas[n.Name] = slices.Clone(n.Meta)
	}
	m.forgetTook(n.Name, meta, err)
	m.mu.Unlock()
	if changed {
		m.log.Debug("member metadata changed", "node", n.Name, "ready", meta.Ready, "taking", meta.Taking, "counted", meta.Counted, "leaving", meta.Leaving)
		m.notify()
	}
}

// metaUpdater is the part of memberlist publishMeta uses.
type metaUpdater interface {
	UpdateNode(timeout time.Duration) error
}

// metaWait bounds how long publishMeta waits for gossip to spread an
// update before the loop goes on (the update keeps spreading).
const metaWait = time.Second

// metaRetry is the pause before publishMeta tries again.
const metaRetry = 100 * time.Millisecond

// publishMeta hands gossip our metadata (SetMeta). memberlist silently
// drops an update whose incarnation a concurrent refutation overtook (a
// restarted agent refuting its own death while publishing), and
// UpdateNode(0) would then wait forever: every later metadata, readiness
// and take confirmations included, would never reach a peer. So the wait
// is bounded and the update is retried until gossip's state carries it.
func (m *Membership) publishMeta(ml metaUpdater) {
	err := ml.UpdateNode(metaWait)
	want := m.meta.Load().([]byte)
	m.mu.Lock()
	taken := string(m.gossiped) == string(want)
	m.mu.Unlock()
	if taken {
		m.repeatMeta() // err: it is still spreading, which goes on by itself
		return
	}
	m.met.metaRetries.Inc()
	m.log.Debug("gossip did not take this node's metadata; publishing again", "err", err)
	time.AfterFunc(metaRetry, m.kickMeta) // after Run: a kick nobody reads
}

// kickMeta asks Run to publish the current metadata; a kick already
// pending covers this one.
func (m *Membership) kickMeta() {
	select {
	case m.metaKick <- struct{}{}:
	default:
	}
}

// metaRepeats are the pauses after which publishMeta publishes a change
// again, unchanged: a new incarnation, so peers take it. memberlist
// broadcasts an update a few times over UDP and repairs a miss only at
// the next push/pull (15 s); the lab once saw a starting agent's
// readiness reach neither peer for 15 s, so they dropped it as a
// candidate when its cold start window ended while it announced: two
// responders until the push/pull. Both repeats fall well inside that
// window (handoff.ColdStartWindow). Cost: two small broadcasts per change
// of a member's metadata, which changes at start-up and hand-offs only.
var metaRepeats = []time.Duration{time.Second, 3 * time.Second}

// repeatMeta schedules the next repeat of the current metadata, if any is
// left; a repeat is skipped when the metadata changed meanwhile (the
// change has repeats of its own).
func (m *Membership) repeatMeta() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.repeatSeq != m.metaSeq {
		m.repeatSeq, m.repeatN = m.metaSeq, 0
	}
	if m.repeatN >= len(m.repeats) {
		return
	}
	d, seq := m.repeats[m.repeatN], m.metaSeq
	m.repeatN++
	time.AfterFunc(d, func() { // after Run: a kick nobody reads
		m.mu.Lock()
		current := m.metaSeq == seq
		m.mu.Unlock()
		if !current {
			return
		}
		m.met.metaRepeats.Inc()
		m.kickMeta()
	})
}

func (m *Membership) notify() {
	m.gen.Add(1)
	select {
	case m.changes <- struct{}{}:
	default:
	}
}

// delegate publishes our metadata (SetMeta, and the leaving mark) and
// receives the one user message Mooring sends (took.go).
type delegate Membership

func (d *delegate) NodeMeta(limit int) []byte {
	b := (*Membership)(d).meta.Load().([]byte)
	if len(b) > limit {
		return nil
	}
	return b
}
func (d *delegate) NotifyMsg(b []byte) {
	switch {
	case len(b) > 1 && b[0] == msgTook:
		(*Membership)(d).receiveTook(b[1:])
	case len(b) > 1 && b[0] == msgSuspect:
		(*Membership)(d).receiveSuspect(b[1:])
	}
}
func (d *delegate) GetBroadcasts(int, int) [][]byte     { return nil }
func (d *delegate) LocalState(bool) []byte              { return nil }
func (d *delegate) MergeRemoteState(buf []byte, _ bool) {}

// merge learns, before memberlist merges a join's state (the peer's whole
// member list), which members that state names alive: they join one by
// one right after, and Settled says whether all have. An agent's first
// decision waits for it (internal/agent settle): deciding between two of
// those joins once saw only the member restarted a second before, and the
// restarted agent took itself for part of a cold start and answered
// beside the peer that had served its addresses (two responders).
type merge Membership

func (g *merge) NotifyMerge(peers []*memberlist.Node) error {
	m := (*Membership)(g)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.merging = map[string]bool{}
	for _, p := range peers {
		if p.Name == m.cfg.NodeName || (p.State != memberlist.StateAlive && p.State != memberlist.StateSuspect) {
			continue
		}
		if _, live := m.live[p.Name]; !live {
			m.merging[p.Name] = true
		}
	}
	return nil
}

// Settled reports whether every member the last join's state named alive
// has joined (true before any join).
func (m *Membership) Settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.merging) == 0
}
