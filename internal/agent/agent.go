package agent

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/netip"
	"reflect"
	"slices"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/conntrack"
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

	// NodeCheck and Conntrack serve fast endpoint eviction (evict.go):
	// without NodeCheck no node is confirmed dead; nil Conntrack cleans
	// nothing.
	NodeCheck NodeCheck
	Conntrack func(conntrack.Match) (int, error)
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

	dirty *dirty
	// One mailbox per consumer of decisions, so each sees the latest.
	toStatus          *mailbox[decision]
	toSafety, toProbe *mailbox[announce.Result]
	events            *eventQueue
	toSnapshot        *mailbox[announce.Result] // snapshot.go
	snapMet           snapshotMetrics

	// Owned by the decision loop.
	state   *announce.State // created by the first decision
	applied bool            // the responder has had a first table
	// answered is what the responder was told, by address: the interface
	// indexes of its local entries.
	answered map[netip.Addr][]int
	prev     announce.Result
	// prefixes are the networks of the node's interfaces by index
	// (networkPrefixes), read with the interfaces; replaced, never
	// modified, so a published decision may share it.
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
	nodeFound    atomic.Bool

	// deferrals are the peers' L2Announcers that defer (partition.go).
	deferrals *deferrals
	wake      *wakeWatch // stalls longer than peers wait (handoff.go)
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
	a := &Agent{
		cfg: cfg, deps: deps, log: log, met: met,
		rec:          &recorder{c: deps.Client, clock: deps.Clock, node: cfg.NodeName, log: log, met: met},
		elig:         newEligibility(cfg.NodeName, log, deps.Registerer, deps.Members),
		dirty:        newDirty(),
		deferrals:    newDeferrals(),
		publishEvery: publishEvery,
		toStatus:     newMailbox[decision](),
		events:       &eventQueue{},
		toSafety:     newMailbox[announce.Result](),
		toProbe:      newMailbox[announce.Result](),
		toSnapshot:   newMailbox[announce.Result](),
		snapMet:      newSnapshotMetrics(deps.Registerer),
	}
	a.wake = newWakeWatch(resumeThreshold(cfg), a.Trigger, deps.Registerer)
	return a
}

// Trigger asks for the Nodes, policies and interfaces to be re-read (link
// watches call it); Services are re-read by the informer handlers, one by
// one. It never blocks: changes arriving during a decision coalesce.
func (a *Agent) Trigger() {
	a.dirty.mark(func(c *changed) { c.nodes, c.policies, c.links = true, true, true })
}

// Run waits for gossip to settle, then recomputes on every change until ctx
// ends. It also runs the status writer and the safety checks, and returns
// when all of them have.
func (a *Agent) Run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	w := &statusWriter{reader: a.deps.Reader, c: a.deps.Client, rec: a.rec, clock: a.deps.Clock,
		node: a.cfg.NodeName, log: a.log, met: a.met, in: a.toStatus, events: a.events, patched: map[string]string{}}
	g.Go(func() error { return w.run(ctx) })
	g.Go(func() error { return a.staleLoop(ctx) })
	g.Go(func() error { return a.elig.eventLoop(ctx, a.deps.Client, a.deps.Clock) })
	if a.deps.Prober != nil && a.cfg.ProbeInterval > 0 {
		g.Go(func() error { return a.probeLoop(ctx) })
	}
	g.Go(func() error { return a.snapshotLoop(ctx) })
	g.Go(func() error { return a.wakeLoop(ctx) })    // handoff.go
	g.Go(func() error { return a.releaseLoop(ctx) }) // partition.go
	if a.cfg.FastEndpointEviction {
		g.Go(func() error { return a.evictLoop(ctx) }) // evict.go
	}
	g.Go(func() error { return a.decideLoop(ctx) })
	return g.Wait()
}

// coalesceWindow bounds how long an informer event waits for the rest of
// its burst; a membership change (a takeover) never waits.
const coalesceWindow = 25 * time.Millisecond

// publishEvery bounds how often new addresses alone publish the decision
// (see publish).
const publishEvery = time.Second

func (a *Agent) decideLoop(ctx context.Context) error {
	if err := a.settle(ctx); err != nil {
		return nil // ctx ended
	}
	a.log.Info("announcing", "node", a.cfg.NodeName, "members", a.deps.Members.Members())
	for {
		if err := a.decide(ctx); err != nil {
			a.log.Warn("recomputing announcements", "err", err)
		}
		var publish <-chan time.Time
		if len(a.pending) > 0 {
			publish = a.deps.Clock.After(a.publishEvery - a.deps.Clock.Since(a.published))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-publish: // decide publishes what waited
		case <-a.deps.Members.Changes():
		case <-a.dirty.kick:
			select {
			case <-ctx.Done():
				return nil
			case <-a.deps.Members.Changes():
			case <-a.deps.Clock.After(coalesceWindow):
			}
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

// decide brings the decision up to date with what changed since the last
// call (everything, the first time): caches and gossip in, responder table
// out. A Service event re-decides that Service's addresses only.
func (a *Agent) decide(ctx context.Context) error {
	start := a.deps.Clock.Now()
	if a.state == nil {
		a.state = announce.NewState(a.cfg.NodeName)
	}
	d := a.dirty.take()
	if a.resumed(ctx) { // handoff.go: a stall made the decision stale
		d.nodes = true
	}
	members, listen, capability, prefixes := a.state.Members(), a.state.Listen(), a.ownCapability(), a.prefixes
	found := a.nodeFound.Load()
	changes, err := a.update(ctx, d)
	if err != nil {
		// Read again next time; what changed before the error still
		// reaches the responder and the status below.
		a.dirty.mark(func(c *changed) { c.merge(d) })
		if !a.applied { // never start from a partial view
			a.pending = append(a.pending, changes...)
			return err
		}
	}
	// The responder gets the whole table once, then only the addresses
	// that changed.
	if !a.applied {
		a.applyAll()
	} else if up := a.responderUpdates(changes); len(up) > 0 {
		a.deps.Responder.Update(up)
	}
	a.confirmApplied() // eligibility.go: only now may peers' returning nodes take
	a.met.decisions.Observe(a.deps.Clock.Since(start).Seconds())
	a.pending = append(a.pending, changes...)
	// What the L2Announcer shows (members, interfaces), moves and losses
	// are published at once; new addresses may wait.
	urgent := d.all || d.policies || found != a.nodeFound.Load() || !slices.Equal(members, a.state.Members()) || !slices.Equal(listen, a.state.Listen()) ||
		!reflect.DeepEqual(capability, a.ownCapability()) ||
		!maps.EqualFunc(prefixes, a.prefixes, slices.Equal[[]string]) ||
		slices.ContainsFunc(changes, func(c announce.Change) bool { return c.From != "" })
	if len(a.pending) == 0 && !urgent {
		return err
	}
	if !urgent && a.deps.Clock.Since(a.published) < a.publishEvery {
		return err // new addresses only: published with the next batch
	}
	a.publish()
	return err
}

// applyAll gives the responder the whole local table.
func (a *Agent) applyAll() {
	desired := a.state.Desired()
	a.answered = map[netip.Addr][]int{}
	for ifindex, addrs := range desired {
		for _, ad := range addrs {
			a.answered[ad] = append(a.answered[ad], ifindex)
		}
	}
	a.deps.Responder.Apply(desired)
	a.applied = true
}

// responderUpdates turns changes into what the responder must start and
// stop answering: every change of local entries is a Change (announce),
// so only those addresses are looked at. Cost: O(changes).
func (a *Agent) responderUpdates(changes []announce.Change) []responder.Change {
	var out []responder.Change
	for _, c := range changes {
		prev := a.answered[c.Addr]
		var now []int
		for _, e := range a.state.Local(c.Addr) {
			now = append(now, e.IfIndex)
		}
		if slices.Equal(prev, now) {
			continue
		}
		for _, i := range prev {
			if !slices.Contains(now, i) {
				out = append(out, responder.Change{IfIndex: i, Addr: c.Addr})
			}
		}
		for _, i := range now {
			if !slices.Contains(prev, i) {
				out = append(out, responder.Change{IfIndex: i, Addr: c.Addr, On: true})
			}
		}
		if now == nil {
			delete(a.answered, c.Addr)
		} else {
			a.answered[c.Addr] = now
		}
	}
	return out
}

// publish hands the whole decision to the status writer and the safety
// checks, and reports the changes since the last publish. At 10,000
// Services materialising the decision costs milliseconds, so during a
// burst of new Services it happens at most every publishEvery; a move, a
// loss or a Node, policy or interface change publishes at once. The
// responder never waits for it.
func (a *Agent) publish() {
	res := a.state.Result()
	a.report(a.pending, res)
	a.events.add(changeEvents(a.pending, res, a.cfg.NodeName)...)
	a.pending = nil
	a.published = a.deps.Clock.Now()
	a.prev = res
	a.toStatus.put(decision{res: res, members: a.state.Members(), capability: a.ownCapability(), prefixes: a.prefixes, applied: a.appliedCfg})
	a.toSafety.put(res)
	a.toProbe.put(res)
	a.toSnapshot.put(res)
}

// ownCapability is this node's capability in the decision, nil if none.
func (a *Agent) ownCapability() *announce.Capability {
	if c, ok := a.state.Capabilities()[a.cfg.NodeName]; ok {
		return &c
	}
	return nil
}

// update feeds the state what d names as changed and returns the changes,
// also those made before an error (the state has them).
func (a *Agent) update(ctx context.Context, d changed) ([]announce.Change, error) {
	var changes []announce.Change
	if d.nodes {
		var nodes corev1.NodeList
		if err := a.deps.Reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
			return changes, fmt.Errorf("listing Nodes from the cache: %w", err)
		}
		a.setPeers(nodes.Items)
		a.nodeSeen(ctx, nodes.Items)
		changes = append(changes, a.state.SetNodes(convertNodes(nodes.Items))...)
	}
	if d.policies {
		var pols mooringv1.L2AnnouncementPolicyList
		if err := a.deps.Reader.List(ctx, &pols, client.UnsafeDisableDeepCopy); err != nil {
			return changes, fmt.Errorf("listing L2AnnouncementPolicies from the cache: %w", err)
		}
		changes = append(changes, a.state.SetPolicies(convertPolicies(pols.Items))...)
		a.appliedCfg = appliedConfig(pols.Items)
	}
	if d.links {
		if ifaces, err := a.deps.Links.Interfaces(); err != nil {
			a.log.Warn("listing interfaces; keeping the last list", "err", err)
		} else {
			changes = append(changes, a.state.SetInterfaces(ifaces)...)
		}
		if ps, err := a.deps.Links.Prefixes(); err != nil {
			a.log.Warn("listing interface addresses; keeping the last networks", "err", err)
		} else {
			next := map[int][]string{}
			for idx, addrs := range ps {
				if nets := networkPrefixes(addrs); len(nets) > 0 {
					next[idx] = nets
				}
			}
			a.prefixes = next
		}
	}
	// What members can serve first, members second: a member that leaves
	// keeps its capability, so its loss stays an incremental change.
	caps, err := a.capabilities(ctx, d) // eligibility.go
	if err != nil {
		return changes, err
	}
	changes = append(changes, a.state.SetCapabilities(caps)...)
	changes = append(changes, a.state.SetMembers(a.deps.Members.Members())...)
	if d.all {
		ch, err := a.syncAllServices(ctx)
		return append(changes, ch...), err
	}
	for k := range d.services {
		ch, err := a.syncService(ctx, k)
		changes = append(changes, ch...)
		if err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// syncService re-reads one Service and its EndpointSlices from the cache.
func (a *Agent) syncService(ctx context.Context, k types.NamespacedName) ([]announce.Change, error) {
	if store := compactOf(a.deps.Reader); store != nil {
		svc, ok := store.announceService(k)
		if !ok {
			return a.state.DeleteService(announce.ServiceKey{Namespace: k.Namespace, Name: k.Name}), nil
		}
		return a.state.SetService(svc), nil
	}
	var svc corev1.Service
	if err := a.deps.Reader.Get(ctx, k, &svc); apierrors.IsNotFound(err) {
		return a.state.DeleteService(announce.ServiceKey{Namespace: k.Namespace, Name: k.Name}), nil
	} else if err != nil {
		return nil, fmt.Errorf("reading Service %s from the cache: %w", k, err)
	}
	var es discoveryv1.EndpointSliceList
	if err := a.deps.Reader.List(ctx, &es, client.InNamespace(k.Namespace), client.MatchingFields{indexSliceService: k.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing the EndpointSlices of %s from the cache: %w", k, err)
	}
	key := serviceKey(&svc)
	return a.state.SetService(convertService(&svc, readyNodes(es.Items)[key])), nil
}

// syncAllServices reads every Service (start-up): the first decision must
// see complete caches, or it would withdraw addresses for a moment.
func (a *Agent) syncAllServices(ctx context.Context) ([]announce.Change, error) {
	if store := compactOf(a.deps.Reader); store != nil {
		return a.setAllServices(store.announceServices()), nil
	}
	var (
		svcs corev1.ServiceList
		es   discoveryv1.EndpointSliceList
	)
	for _, l := range []client.ObjectList{&svcs, &es} {
		if err := a.deps.Reader.List(ctx, l, client.UnsafeDisableDeepCopy); err != nil {
			return nil, fmt.Errorf("listing from the cache: %w", err)
		}
	}
	ready := readyNodes(es.Items)
	all := make([]announce.Service, 0, len(svcs.Items))
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		all = append(all, convertService(svc, ready[serviceKey(svc)]))
	}
	return a.setAllServices(all), nil
}

// setAllServices makes svcs the state's Services.
func (a *Agent) setAllServices(svcs []announce.Service) []announce.Change {
	seen := make(map[announce.ServiceKey]bool, len(svcs))
	var changes []announce.Change
	for _, svc := range svcs {
		seen[svc.Key] = true
		changes = append(changes, a.state.SetService(svc)...)
	}
	for _, k := range a.state.ServiceKeys() {
		if !seen[k] {
			changes = append(changes, a.state.DeleteService(k)...)
		}
	}
	return changes
}

// report logs and counts what changed for this node. A first
// announcement is logged at debug level only: at start-up it is every
// address this node owns.
func (a *Agent) report(changes []announce.Change, res announce.Result) {
	local := a.cfg.NodeName
	for _, mv := range changes {
		switch {
		case mv.From == mv.To:
		case mv.To == local:
			a.met.ownershipChanges.WithLabelValues("gained").Inc()
			if mv.From == "" {
				a.log.Debug("now announcing", "addr", mv.Addr)
			} else {
				a.log.Info("now announcing", "addr", mv.Addr, "was", mv.From)
			}
		case mv.From == local:
			a.met.ownershipChanges.WithLabelValues("lost").Inc()
			a.log.Info("stopped announcing", "addr", mv.Addr, "now", mv.To)
		}
	}
	owned := 0
	for _, o := range res.Owners {
		if o.Node == local {
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
