package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/backend"
	"github.com/mooringlb/mooring/internal/agent/eligibility"
	"github.com/mooringlb/mooring/internal/agent/evict"
	"github.com/mooringlb/mooring/internal/agent/gossip"
	"github.com/mooringlb/mooring/internal/agent/handoff"
	"github.com/mooringlb/mooring/internal/agent/health"
	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/agent/safety"
	"github.com/mooringlb/mooring/internal/agent/snapshot"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/membership"
	"github.com/mooringlb/mooring/internal/responder"
)

// Members is what the agent needs from gossip (internal/membership).
type Members interface {
	Members() []string
	Changes() <-chan struct{}
	SetPeers(addrs []string)
}

// Responder converges the raw-socket answers to a table (internal/responder):
// Apply replaces the whole table, Update changes the named addresses only.
type Responder interface {
	Apply(desired map[int][]netip.Addr)
	Update(changes []responder.Change)
}

// Links reads and watches the node's interfaces and addresses (netlink).
type Links interface {
	Interfaces() ([]announce.Interface, error)
	Addrs() ([]announce.LocalAddr, error)
	// Prefixes are the interfaces' addresses with their prefix lengths
	// (192.168.1.10/24), by interface index.
	Prefixes() (map[int][]netip.Prefix, error)
	// Watch calls changed after every link or address change until ctx ends.
	Watch(ctx context.Context, changed func()) error
}

// Deps are the agent's adapters; Run (run.go) builds the real ones.
type Deps struct {
	Reader     client.Reader // informer cache: the only source of API state
	Client     client.Client // writes: L2Announcer, policy status, Events, pod status
	Members    Members
	Responder  Responder
	Links      Links
	Sysctls    safety.Sysctls
	Prober     safety.Prober // nil disables the split-brain probe
	Clock      clock.WithTicker
	Registerer prometheus.Registerer

	// NodeCheck and Conntrack serve fast endpoint eviction
	// (internal/agent/evict): without NodeCheck no node is confirmed
	// dead; nil Conntrack cleans nothing.
	NodeCheck evict.NodeCheck
	Conntrack func(conntrack.Match) (int, error)

	// Backends are announcement backends beside the L2 responder; each
	// gets every decision pass (internal/agent/backend).
	Backends []backend.Backend
}

// Agent turns caches and gossip into a responder table, with no API call on
// the way: only the informer caches and the live member set are read, so it
// keeps announcing and failing over while the API server is away.
type Agent struct {
	cfg   Config
	deps  Deps
	log   *slog.Logger
	met   *metrics
	rec   *status.Recorder
	elig  *eligibility.Eligibility
	ready *health.State
	stall *handoff.Stall

	dirty *dirty
	// One mailbox per consumer of decisions, so each sees the latest.
	toStatus                      *mailbox.Box[status.Decision]
	toSafety, toProbe, toSnapshot *mailbox.Box[announce.Result]
	events                        *status.EventQueue
	snapMet                       snapshot.Metrics
	safetyMet                     safety.Metrics

	// Owned by the decision loop.
	loop loopState

	// deferrals are the peers' L2Announcers that defer (internal/agent/gossip).
	deferrals *gossip.Deferrals
	// leave is set on SIGTERM (leave.go).
	leave *leaveState
}

// loopState is what the decision loop keeps between passes.
type loopState struct {
	state   *announce.State // created by the first decision
	applied bool            // the responder has had a first table
	// answered is what the responder was told, by address: the interface
	// indexes of its local entries.
	answered map[netip.Addr][]int
	prev     announce.Result
	// prefixes are the networks of the node's interfaces by index
	// (eligibility.NetworkPrefixes), read with the interfaces; replaced,
	// never modified, so a published decision may share it.
	prefixes map[int][]string
	// appliedCfg is the policies' generations the state was last given;
	// nil until they were first read.
	appliedCfg *mooringv1.AppliedConfig
	pending    []announce.Change // not yet published
	// published is when the decision was last published; publishEvery
	// bounds how often new addresses alone publish it.
	published    time.Time
	publishEvery time.Duration
	peers        []string
	problems     []announce.Problem
	// missingSince is when the agent first saw no Node of its name.
	missingSince time.Time
	// unanswered is what the last published decision said the responder
	// cannot answer on (responder.Manager.Unanswered).
	unanswered map[int]string
	// handing are the addresses this node answers for until the returning
	// peer the decision gave them to took them (handing.go);
	// handingStarted says a pass began one (decide schedules its end).
	handing        map[netip.Addr]handing
	handingStarted bool
	// handedTo, handedN and claimedN describe the hand-overs begun in
	// this pass (logged once): to whom (the last), how many, and how many
	// answered with that node's MAC.
	handedTo          string
	handedN, claimedN int
	// claims caches claim's answers within one pass.
	claims map[claimKey]net.HardwareAddr
	// reannounce are the addresses whose hand-over ended back here after
	// answering with the peer's MAC: announced after the update.
	reannounce []responder.Change
	// lettingGo: this node stops serving while it could (eligibility's
	// LettingGo); leaving: because the agent stops (leave.go).
	lettingGo, leaving bool
	// meta is this node's gossip metadata computed in this pass, published
	// once the responder has the pass's changes (a node that stops
	// serving answers with its peers' MACs before they hear it).
	meta *membership.NodeMeta
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
	g, _ := deps.Members.(eligibility.Gossip)
	a := &Agent{
		cfg: cfg, deps: deps, log: log, met: newMetrics(deps.Registerer),
		elig:       eligibility.New(cfg.eligibilityConfig(), time.Now(), log, deps.Registerer, g),
		ready:      &health.State{},
		dirty:      newDirty(),
		deferrals:  gossip.NewDeferrals(),
		toStatus:   mailbox.New[status.Decision](),
		events:     &status.EventQueue{},
		toSafety:   mailbox.New[announce.Result](),
		toProbe:    mailbox.New[announce.Result](),
		toSnapshot: mailbox.New[announce.Result](),
		snapMet:    snapshot.NewMetrics(deps.Registerer),
		safetyMet:  safety.NewMetrics(deps.Registerer),
		loop:       loopState{publishEvery: publishEvery},
		leave:      newLeaveState(),
	}
	a.rec = &status.Recorder{C: deps.Client, Clock: deps.Clock, Node: cfg.NodeName, Log: log, Writes: a.met.writes}
	a.stall = handoff.NewStall(resumeThreshold(cfg), a.Trigger, deps.Registerer)
	return a
}

// Trigger asks for the Nodes, policies and interfaces to be re-read (link
// watches call it); Services are re-read by the informer handlers, one by
// one. It never blocks: changes arriving during a decision coalesce.
func (a *Agent) Trigger() {
	a.dirty.mark(func(c *changed) { c.nodes, c.policies, c.links = true, true, true })
}

// Run waits for gossip to settle, then recomputes on every change until ctx
// ends. It also runs the status writer, the safety checks, the snapshot,
// the partition releases, the stall watch, fast eviction and the
// backends, and returns when all of them have.
func (a *Agent) Run(ctx context.Context) error {
	g, loopCtx := errgroup.WithContext(ctx)
	ctx = a.untilLeaving(loopCtx) // the decision loop alone hands addresses over (leave.go)
	w := status.NewWriter(a.deps.Reader, a.rec, a.deps.Clock, a.toStatus, a.events)
	g.Go(func() error { return w.Run(ctx) })
	checks := a.safetyChecks()
	g.Go(func() error { return checks.RunStale(ctx, a.toSafety) })
	g.Go(func() error { return checks.RunProbe(ctx, a.toProbe) })
	g.Go(func() error { return a.elig.RunEvents(ctx, a.deps.Client, a.deps.Clock) })
	keeper := &snapshot.Keeper{Dir: a.cfg.StateDir, Node: a.cfg.NodeName, Reader: a.deps.Reader, Clock: a.deps.Clock, Log: a.log, Metrics: a.snapMet}
	g.Go(func() error {
		return keeper.Run(ctx, a.toSnapshot, func() bool { return a.ready.Source.Load() == health.SourceLive })
	})
	g.Go(func() error { return a.stall.Run(ctx) })
	if rel, ok := a.deps.Members.(gossip.Releaser); ok && a.deps.Reader != nil {
		g.Go(func() error { return a.deferrals.RunReleases(ctx, rel, a.deps.Clock, a.log) })
	}
	if a.cfg.FastEndpointEviction {
		g.Go(func() error { return a.runEviction(ctx) })
	}
	for _, b := range a.deps.Backends {
		g.Go(func() error { return b.Run(ctx) })
	}
	g.Go(func() error { return a.decideLoop(loopCtx) })
	return g.Wait()
}

// safetyChecks builds the stale-address check and the split-brain probe.
func (a *Agent) safetyChecks() *safety.Checks {
	deps := safety.Deps{Reader: a.deps.Reader, Addrs: a.deps.Links.Addrs, Sysctls: a.deps.Sysctls, Prober: a.deps.Prober,
		Recorder: a.rec, Stalled: a.stalled, Clock: a.deps.Clock, Log: a.log}
	if r, ok := a.deps.Responder.(interface{ Reannounce(int, netip.Addr) }); ok {
		deps.Reannounce = r.Reannounce
	}
	return safety.New(safety.Config{Node: a.cfg.NodeName, SafetyInterval: a.cfg.SafetyInterval,
		ProbeInterval: a.cfg.ProbeInterval, ProbeWait: a.cfg.ProbeWait}, deps, a.safetyMet)
}

// runEviction runs fast endpoint eviction; without the partition state a
// minority could evict, so it refuses a membership that has none.
func (a *Agent) runEviction(ctx context.Context) error {
	view, ok := a.deps.Members.(evict.View)
	if !ok {
		return fmt.Errorf("fast endpoint eviction: the membership (%T) reports no partition state", a.deps.Members)
	}
	e := evict.New(evict.Config{Node: a.cfg.NodeName, MaxShare: a.cfg.FastEvictionMaxShare},
		evict.Deps{View: view, Reader: a.deps.Reader, Client: a.deps.Client, NodeCheck: a.deps.NodeCheck, Conntrack: a.deps.Conntrack,
			Recorder: a.rec, Clock: a.deps.Clock, Log: a.log}, a.deps.Registerer)
	return e.Run(ctx)
}
