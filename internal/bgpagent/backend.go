package bgpagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// Config configures the BGP backend of one node's agent.
type Config struct {
	// Node is this node's name.
	Node string
	// Namespace holds the peers' password Secrets (Mooring's own).
	Namespace string
	// StateDir keeps the BGP state file for restarts while the API server
	// is away ("" keeps none).
	StateDir string
	// ListenPort is where the speaker accepts sessions (<= 0: it does not
	// listen).
	ListenPort int
	// Settle batches changes: a decision runs at most this often, and
	// after a long decision later still (settleWait: the whole decision
	// at 10,000 Services costs ~30 ms of CPU, so there it waits ~270 ms).
	// 10 ms by default: a change that follows another decision is late by
	// at most that (50 ms before session 20: one Service in ten reached
	// the router 40 ms later for it; docs/benchmarks.md, "Where the ~100
	// ms from a created Service to its route goes").
	Settle time.Duration
	// StatusInterval bounds BGPSpeaker writes (one per interval at most);
	// CountsInterval bounds how stale its prefix counters may get.
	StatusInterval, CountsInterval time.Duration
	// SecretInterval is how often a password Secret is read again.
	SecretInterval time.Duration
}

// WithDefaults fills zero durations.
func (c Config) WithDefaults() Config {
	if c.Settle == 0 {
		c.Settle = 10 * time.Millisecond
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = time.Second
	}
	if c.CountsInterval == 0 {
		c.CountsInterval = time.Minute
	}
	if c.SecretInterval == 0 {
		c.SecretInterval = time.Minute
	}
	return c
}

// Deps are the backend's connections.
type Deps struct {
	// Reader reads the BGP objects, pools, Nodes and Namespaces (the
	// agent's informer cache).
	Reader client.Reader
	// Client writes the BGPSpeaker and reads Secrets (no cache: the agent
	// may not watch Secrets).
	Client client.Client
	// Synced reports whether Reader holds the whole cluster; until it does
	// the backend decides from its state file.
	Synced func() bool
	// Router is the BGP implementation (bgpspeaker.NewGoBGP).
	Router bgpspeaker.Router
	Log    *slog.Logger
	Now    func() time.Time
	// Registerer, when set, gets the BGP session metrics (metrics.go).
	Registerer prometheus.Registerer
	// Conntrack, when set, forgets the node's stale conntrack entries of an
	// address it advertises again (returns.go).
	Conntrack Forgetter
}

// Backend drives the node's BGP speaker from the Services the agent's loop
// hands it and the BGP objects it reads, and writes the node's BGPSpeaker.
type Backend struct {
	cfg     Config
	d       Deps
	speaker *bgpspeaker.Speaker
	secrets *secrets
	status  *statusWriter
	metrics *metrics
	wake    chan struct{}
	// kick asks the status goroutine for a write (statusLoop).
	kick chan struct{}

	mu     sync.Mutex
	writer bool // this agent writes the objects' conditions
	// services holds pointers: a map's slots are allocated for its whole
	// capacity, and a pointer slot is a fifth of a Service's.
	services map[announce.ServiceKey]*announce.Service
	// full: the agent's loop has handed over all Services once. Until
	// then nothing is decided: a session opened with no routes would send
	// End-of-RIB with none, and the routers would drop the node's routes
	// that graceful restart kept.
	full     bool
	fromFile *state // the state file, used until Reader is synced
	saved    *state // last state written
	// applied: the speaker has had its first Apply (Run's goroutine only).
	applied  bool
	last     bgp.NodeResult
	problems []bgp.Problem
	// returns and forgotten: Run's goroutine only (forgetReturning).
	returns   returns
	forgotten prometheus.Counter
}

// New builds a backend; Run runs it.
func New(cfg Config, d Deps) *Backend {
	cfg = cfg.WithDefaults()
	if d.Now == nil {
		d.Now = time.Now
	}
	if d.Log == nil {
		d.Log = slog.New(slog.DiscardHandler)
	}
	b := &Backend{
		cfg: cfg, d: d, speaker: bgpspeaker.New(d.Router, d.Log, cfg.ListenPort),
		status: &statusWriter{c: d.Client, node: cfg.Node, minInterval: cfg.StatusInterval, countsEvery: cfg.CountsInterval, now: d.Now},
		wake:   make(chan struct{}, 1), kick: make(chan struct{}, 1), services: map[announce.ServiceKey]*announce.Service{},
		metrics: &metrics{},
		forgotten: prometheus.NewCounter(prometheus.CounterOpts{Name: "mooring_bgp_conntrack_forgotten_total",
			Help: "Stale conntrack entries the node forgot when it advertised an address again (ECMP-rehashed flows pinned to a pod that may be gone; docs/bgp.md)."}),
	}
	if d.Registerer != nil {
		d.Registerer.MustRegister(b.metrics, b.forgotten)
	}
	// A Secret read that changed a password asks for a decision like any
	// other input.
	b.secrets = newSecrets(d.Client, cfg.Namespace, cfg.SecretInterval, d.Now, b.Trigger)
	return b
}

// Name implements the agent's backend interface.
func (b *Backend) Name() string { return "bgp" }

// Trigger asks for a new decision (a BGP object, a pool, a Node changed).
func (b *Backend) Trigger() {
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

// SetStatusWriter makes this agent the one that writes the BGP objects'
// conditions (the agent's loop picks one live member for all).
func (b *Backend) SetStatusWriter(on bool) {
	b.mu.Lock()
	changed := b.writer != on
	b.writer = on
	b.mu.Unlock()
	if changed {
		b.Trigger()
	}
}

// SetServices takes the Services of one pass of the agent's loop: all of
// them (full) or the ones re-read, and those deleted. It keeps the
// pointers (the L2 state holds the same: neither changes them; a changed
// Service comes as a new pointer). It returns at once.
func (b *Backend) SetServices(full bool, svcs []*announce.Service, deleted []announce.ServiceKey) {
	b.mu.Lock()
	if full {
		clear(b.services)
		b.full = true
	}
	for _, s := range svcs {
		b.services[s.Key] = s
	}
	for _, k := range deleted {
		delete(b.services, k)
	}
	b.mu.Unlock()
	b.Trigger()
}

// Run decides and applies until ctx ends, then stops BGP gracefully (no
// Cease: routers keep the node's routes for the graceful-restart time,
// so an agent restart withdraws nothing). The status is written on a
// goroutine of its own: an API server that hangs (a write waits for it)
// must not hold up a decision; so are the password Secrets' reads
// (secrets), which end with ctx: Run returns after them.
func (b *Backend) Run(ctx context.Context) error {
	defer b.secrets.wait()
	if st, ok, err := loadState(b.cfg.StateDir); err != nil {
		b.d.Log.Warn("BGP state file unusable", "err", err)
	} else if ok {
		b.fromFile = &st
		b.secrets.restore(st.Passwords)
	}
	var changed <-chan struct{}
	if n, ok := b.d.Router.(interface{ Changed() <-chan struct{} }); ok {
		changed = n.Changed()
	}
	sctx, stopStatus := context.WithCancel(ctx)
	statusDone := make(chan struct{})
	go func() { defer close(statusDone); b.statusLoop(sctx) }()
	defer func() { stopStatus(); <-statusDone }()
	b.Trigger()
	for {
		select {
		case <-ctx.Done():
			shut, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			return b.speaker.Shutdown(shut, true)
		case <-b.wake:
			start := time.Now()
			sessions := b.decide(ctx)
			took := time.Since(start)
			if sessions {
				b.kickStatus()
			}
			b.settle(ctx, settleWait(b.cfg.Settle, took))
		case <-changed:
			b.kickStatus()
		}
	}
}

// kickStatus asks statusLoop for a write (when due).
func (b *Backend) kickStatus() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// statusLoop writes the status when kicked and every StatusInterval
// (prefix counters, writes deferred by the rate limit) until ctx ends.
func (b *Backend) statusLoop(ctx context.Context) {
	tick := time.NewTicker(b.cfg.StatusInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.kick:
		case <-tick.C:
		}
		b.writeStatus(ctx)
	}
}

// settle waits d so that changes arriving meanwhile go into one decision.
func (b *Backend) settle(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// decideShare bounds the share of its time the backend spends deciding
// while changes keep coming: after a decision that took d it waits at
// least (decideShare-1)·d before the next.
const decideShare = 10

// settleWait is the pause after a decision that took took: the configured
// settle, or longer when the decision was long. Every decision recomputes
// the node's whole route set (bgp.Decide, then the speaker's diff): at
// 10,000 Services about 27 ms (BenchmarkDecide10k), which with only the
// 50 ms settle kept each agent at 35 % of a core for the whole of a
// 10,000-Service burst (docs/benchmarks.md, "BGP at 10,000 Services").
// With the bound, a burst costs at most a tenth of a core per agent
// whatever the count; a lone change after a quiet spell is still decided
// at once (the wait comes after a decision, not before it). took is wall
// time: on a starved machine the backend backs off further, which is what
// the machine needs then.
func settleWait(settle, took time.Duration) time.Duration {
	return max(settle, (decideShare-1)*took)
}

// decide reads the inputs, decides for this node and applies the result;
// nothing before the agent's loop has handed over every Service once. It
// reports whether the status may show something new: the node's sessions
// changed in more than their routes, or the speaker refused the decision.
// A change of routes alone reads no session state (the speaker's listing
// costs O(routes) in GoBGP): the status loop's tick and the router's
// state events keep the status current.
func (b *Backend) decide(ctx context.Context) bool {
	b.mu.Lock()
	full := b.full
	b.mu.Unlock()
	if !full {
		return false
	}
	in, objs, err := b.input(ctx)
	live := objs != nil
	if err != nil {
		b.d.Log.Warn("BGP: cannot read the BGP objects yet; keeping what is advertised", "err", err)
		return false
	}
	res := bgp.Decide(in)
	nr, _ := res.Node(b.cfg.Node)
	b.forgetReturning(nr)
	// Only the first Apply waits for Secrets never read (secrets says why).
	pw := b.secrets.passwords(ctx, passwordNames(nr), !b.applied)
	err = b.speaker.Apply(ctx, bgpspeaker.Desired{Node: nr, Passwords: pw})
	first := !b.applied
	b.applied = true
	if err != nil {
		b.d.Log.Warn("BGP: applying the decision", "err", err)
	}
	b.mu.Lock()
	news := first || err != nil || sessionsChanged(b.last, nr)
	b.last, b.problems = nr, res.Problems
	writer := b.writer
	b.mu.Unlock()
	if live {
		b.save(in)
	}
	if live && writer {
		if err := writeConditions(ctx, b.d.Client, *objs, res.Problems); err != nil {
			b.d.Log.Warn("BGP: writing conditions", "err", err)
		}
	}
	return news
}

// sessionsChanged reports whether a and b differ in more than their
// sessions' routes: what the BGPSpeaker status shows of a decision.
func sessionsChanged(a, b bgp.NodeResult) bool {
	if a.Node != b.Node || a.RouterID != b.RouterID || a.ASN != b.ASN || a.Excluded != b.Excluded || len(a.Sessions) != len(b.Sessions) {
		return true
	}
	for i := range a.Sessions {
		x, y := a.Sessions[i], b.Sessions[i]
		x.Routes, y.Routes = nil, nil
		if !reflect.DeepEqual(x, y) {
			return true
		}
	}
	return false
}

func passwordNames(nr bgp.NodeResult) []string {
	var out []string
	for _, s := range nr.Sessions {
		if s.PasswordSecret != "" && !slices.Contains(out, s.PasswordSecret) {
			out = append(out, s.PasswordSecret)
		}
	}
	return out
}

// save keeps the live configuration in the state file when it changed.
func (b *Backend) save(in bgp.Input) {
	st := state{Input: in, Passwords: b.secrets.known()}
	st.Input.Services = nil
	if b.saved != nil && reflect.DeepEqual(*b.saved, st) {
		return
	}
	if err := saveState(b.cfg.StateDir, st); err != nil {
		b.d.Log.Warn("BGP: writing the state file", "err", err)
		return
	}
	b.saved = &st
}

// input is the decision's input: live objects once the cache synced
// (returned too), else the state file (objects nil).
func (b *Backend) input(ctx context.Context) (bgp.Input, *Objects, error) {
	var in bgp.Input
	var objs *Objects
	switch {
	case b.d.Synced == nil || b.d.Synced():
		o, err := b.read(ctx)
		if err != nil {
			return bgp.Input{}, nil, err
		}
		in, objs = Input(o), &o
	case b.fromFile != nil:
		in = b.fromFile.Input
	default:
		return bgp.Input{}, nil, errors.New("the API server has not answered yet and there is no BGP state file")
	}
	in.Local = b.cfg.Node
	b.mu.Lock()
	in.Services = make([]*announce.Service, 0, len(b.services))
	for _, s := range b.services {
		in.Services = append(in.Services, s) // never modified: SetServices replaces them
	}
	b.mu.Unlock()
	return in, objs, nil
}

// read lists the objects the decision needs. Namespaces are read only
// when an advertisement selects by them.
func (b *Backend) read(ctx context.Context) (Objects, error) {
	var (
		peers mooringv1.BGPPeerList
		advs  mooringv1.BGPAdvertisementList
		comms mooringv1.BGPCommunityList
		bfds  mooringv1.BFDProfileList
		pools mooringv1.LoadBalancerIPPoolList
		node  corev1.Node
	)
	for _, l := range []client.ObjectList{&peers, &advs, &comms, &bfds, &pools} {
		if err := b.d.Reader.List(ctx, l); err != nil {
			return Objects{}, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	if err := b.d.Reader.Get(ctx, client.ObjectKey{Name: b.cfg.Node}, &node); err != nil {
		return Objects{}, fmt.Errorf("reading Node %s: %w", b.cfg.Node, err)
	}
	objs := Objects{Peers: peers.Items, Advertisements: advs.Items, Communities: comms.Items, BFDProfiles: bfds.Items,
		Pools: pools.Items, Nodes: []corev1.Node{node}}
	if slices.ContainsFunc(advs.Items, func(a mooringv1.BGPAdvertisement) bool { return len(a.Spec.NamespaceSelectors) > 0 }) {
		var ns corev1.NamespaceList
		if err := b.d.Reader.List(ctx, &ns); err != nil {
			return Objects{}, fmt.Errorf("listing Namespaces: %w", err)
		}
		objs.Namespaces = ns.Items
	}
	return objs, nil
}

// writeStatus writes the node's BGPSpeaker when a session changed.
func (b *Backend) writeStatus(ctx context.Context) {
	sessions, err := b.speaker.Status(ctx)
	if err != nil {
		b.d.Log.Warn("BGP: reading the sessions", "err", err)
		return
	}
	b.metrics.set(sessions)
	b.mu.Lock()
	nr := b.last
	b.mu.Unlock()
	if err := b.status.write(ctx, desiredStatus(nr, sessions, nil)); err != nil {
		b.d.Log.Warn("BGP: writing the status", "err", err)
	}
}

// Problems returns the last decision's problems (for conditions).
func (b *Backend) Problems() []bgp.Problem {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.problems)
}
