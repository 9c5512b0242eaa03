package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// Members is what the agent needs from gossip (internal/membership).
type Members interface {
	Members() []string
	Changes() <-chan struct{}
	SetPeers(addrs []string)
}

// Responder converges the raw-socket answers to a table (internal/responder).
type Responder interface {
	Apply(desired map[int][]netip.Addr)
}

// Links reads and watches the node's interfaces and addresses (netlink).
type Links interface {
	Interfaces() ([]announce.Interface, error)
	Addrs() ([]announce.LocalAddr, error)
	// Watch calls changed after every link or address change until ctx ends.
	Watch(ctx context.Context, changed func()) error
}

// Sysctls reads the kernel settings the stale-address check needs; a seam
// so the check is testable without /proc.
type Sysctls interface {
	// ArpIgnore returns net.ipv4.conf.<iface>.arp_ignore ("all" included).
	ArpIgnore(iface string) (int, error)
}

// Prober asks who answers for addrs on an interface and returns, per
// address, the MACs other than this interface's own that answered.
type Prober interface {
	Probe(ctx context.Context, ifindex int, addrs []netip.Addr, wait time.Duration) (map[netip.Addr][]net.HardwareAddr, error)
}

// Deps are the agent's adapters; Run (run.go) builds the real ones.
type Deps struct {
	Reader     client.Reader // informer cache: the only source of API state
	Client     client.Client // writes: annotations, policy status, events
	Members    Members
	Responder  Responder
	Links      Links
	Sysctls    Sysctls
	Prober     Prober // nil disables the split-brain probe
	Clock      clock.WithTicker
	Registerer prometheus.Registerer
}

// Agent turns caches and gossip into a responder table, with no API call on
// the way: only the informer caches and the live member set are read, so it
// keeps announcing and failing over while the API server is away.
type Agent struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	met   *metrics
	rec   *recorder
	elig  *eligibility // eligibility.go
	ready readiness    // health.go

	trigger chan struct{}
	// One mailbox per consumer of decisions, so each sees the latest.
	toStatus, toSafety, toProbe *mailbox[announce.Result]

	// Owned by the decision loop.
	prev     announce.Result
	peers    []string
	ifaces   []announce.Interface
	problems []announce.Problem
}

// New builds an agent; nothing runs until Run.
func New(cfg Config, deps Deps) *Agent {
	if deps.Clock == nil {
		deps.Clock = clock.RealClock{}
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	met := newMetrics(deps.Registerer)
	return &Agent{
		cfg: cfg, deps: deps, log: log, met: met,
		rec:      &recorder{c: deps.Client, clock: deps.Clock, node: cfg.NodeName, log: log, met: met},
		elig:     newEligibility(cfg.NodeName, log, deps.Registerer, deps.Members),
		trigger:  make(chan struct{}, 1),
		toStatus: newMailbox[announce.Result](),
		toSafety: newMailbox[announce.Result](),
		toProbe:  newMailbox[announce.Result](),
	}
}

// Trigger asks for a recompute; informer handlers and link watches call it.
// It never blocks: changes arriving during a recompute coalesce into one.
func (a *Agent) Trigger() { poke(a.trigger) }

// Run waits for gossip to settle, then recomputes on every change until ctx
// ends. It also runs the status writer and the safety checks, and returns
// when all of them have.
func (a *Agent) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	w := &statusWriter{reader: a.deps.Reader, c: a.deps.Client, rec: a.rec, clock: a.deps.Clock,
		node: a.cfg.NodeName, log: a.log, met: a.met, in: a.toStatus, patched: map[string]string{}}
	g.Go(func() error { return w.run(ctx) })
	g.Go(func() error { return a.staleLoop(ctx) })
	g.Go(func() error { return a.elig.eventLoop(ctx, a.deps.Client, a.deps.Clock) })
	if a.deps.Prober != nil && a.cfg.ProbeInterval > 0 {
		g.Go(func() error { return a.probeLoop(ctx) })
	}
	g.Go(func() error { return a.decideLoop(ctx) })
	return g.Wait()
}

func (a *Agent) decideLoop(ctx context.Context) error {
	if err := a.settle(ctx); err != nil {
		return nil // ctx ended
	}
	a.log.Info("announcing", "node", a.cfg.NodeName, "members", a.deps.Members.Members())
	for {
		if err := a.decide(ctx); err != nil {
			a.log.Warn("recomputing announcements", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-a.trigger:
		case <-a.deps.Members.Changes():
		}
	}
}

// settle hands gossip the peers and waits until it has found one (or there
// are none, or SettleTimeout passed): an agent that believed itself alone
// would claim every address and send gratuitous ARP for all of them.
func (a *Agent) settle(ctx context.Context) error {
	var nodes corev1.NodeList
	if err := a.deps.Reader.List(ctx, &nodes); err != nil {
		return err
	}
	a.setPeers(nodes.Items)
	if len(a.peers) == 0 {
		return nil
	}
	timeout := a.deps.Clock.After(a.cfg.SettleTimeout)
	poll := a.deps.Clock.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	for len(a.deps.Members.Members()) < 2 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			a.log.Warn("no gossip peer answered yet; announcing with the members known", "peers", a.peers, "waited", a.cfg.SettleTimeout)
			return nil
		case <-a.deps.Members.Changes():
		case <-poll.C():
		}
	}
	return nil
}

func (a *Agent) setPeers(nodes []corev1.Node) {
	peers := peersOf(nodes, a.cfg.NodeName, a.cfg.GossipPort)
	slices.Sort(peers)
	if !slices.Equal(peers, a.peers) {
		a.peers = peers
		a.setMemberPeers(nodes, peers) // gossip.go
	}
}

// decide is one recompute: caches and gossip in, responder table out.
func (a *Agent) decide(ctx context.Context) error {
	start := a.deps.Clock.Now()
	snap, err := a.snapshot(ctx)
	if err != nil {
		return err
	}
	a.setPeers(snap.nodes)
	in := buildInput(snap)
	in.Members = a.deps.Members.Members()
	in.Local = a.cfg.NodeName
	if ifaces, err := a.deps.Links.Interfaces(); err != nil {
		a.log.Warn("listing interfaces; keeping the last list", "err", err)
	} else {
		a.ifaces = ifaces
	}
	in.Interfaces = a.ifaces
	in.Capabilities = a.capabilities(snap, in.Policies)
	res := announce.Decide(in)
	a.deps.Responder.Apply(res.Desired())
	a.met.decisions.Observe(a.deps.Clock.Since(start).Seconds())
	a.report(res)
	a.prev = res
	a.toStatus.put(res)
	a.toSafety.put(res)
	a.toProbe.put(res)
	return nil
}

func (a *Agent) snapshot(ctx context.Context) (snapshot, error) {
	var (
		pols   mooringv1.L2AnnouncementPolicyList
		svcs   corev1.ServiceList
		slices discoveryv1.EndpointSliceList
		nodes  corev1.NodeList
	)
	for _, l := range []client.ObjectList{&pols, &svcs, &slices, &nodes} {
		// Read-only use of cached objects: copying thousands of Services on
		// every recompute would cost more than the decision itself.
		if err := a.deps.Reader.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return snapshot{}, fmt.Errorf("listing from the cache: %w", err)
		}
	}
	return snapshot{policies: pols.Items, services: svcs.Items, slices: slices.Items, nodes: nodes.Items}, nil
}

// report logs and counts what changed for this node.
func (a *Agent) report(res announce.Result) {
	for _, mv := range announce.Moves(a.prev.Owners, res.Owners) {
		switch local := a.cfg.NodeName; {
		case mv.To == local:
			a.met.ownershipChanges.WithLabelValues("gained").Inc()
			a.log.Info("now announcing", "addr", mv.Addr, "was", mv.From)
		case mv.From == local:
			a.met.ownershipChanges.WithLabelValues("lost").Inc()
			a.log.Info("stopped announcing", "addr", mv.Addr, "now", mv.To)
		}
	}
	owned := 0
	for _, o := range res.Owners {
		if o.Node == a.cfg.NodeName {
			owned++
		}
	}
	a.met.owned.Set(float64(owned))
	a.met.announced.Set(float64(len(res.Owners)))
	a.met.policyProblems.Set(float64(len(res.Problems)))
	if !slices.Equal(res.Problems, a.problems) {
		for _, p := range res.Problems {
			if !slices.Contains(a.problems, p) {
				a.log.Warn("announcement problem", "policy", p.Policy, "addr", p.Addr, "field", p.Field, "problem", p.Message)
			}
		}
		a.problems = res.Problems
	}
}
