package agent

import (
	"context"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/backend"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/agent/eligibility"
	"github.com/mooringlb/mooring/internal/agent/gossip"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/agent/store"
	"github.com/mooringlb/mooring/internal/announce"
)

// coalesceWindow bounds how long an informer event waits for the rest of
// its burst; a membership change (a takeover) never waits.
const coalesceWindow = 25 * time.Millisecond

// manyChanges is how many changes in one pass make the decision log its
// timing at debug level (a node loss at thousands of Services).
const manyChanges = 100

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
		if len(a.loop.pending) > 0 {
			publish = a.deps.Clock.After(a.loop.publishEvery - a.deps.Clock.Since(a.loop.published))
		}
		select {
		case <-ctx.Done():
			return nil
		case <-publish: // decide publishes what waited
		case <-a.unansweredChanges(): // decide publishes it
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
	if len(a.loop.peers) == 0 {
		return nil
	}
	timeout := a.deps.Clock.After(a.cfg.SettleTimeout)
	poll := a.deps.Clock.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	// Every member the first peer's state names, not just that peer: the
	// first decision judges cold start against restart from all of them
	// (membership.Settled).
	settled := func() bool { return true }
	if s, ok := a.deps.Members.(interface{ Settled() bool }); ok {
		settled = s.Settled
	}
	for len(a.deps.Members.Members()) < 2 || !settled() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timeout:
			a.log.Warn("no gossip peer answered yet; announcing with the members known", "peers", a.loop.peers, "waited", a.cfg.SettleTimeout)
			return nil
		case <-a.deps.Members.Changes():
		case <-poll.C():
		}
	}
	return nil
}

// setPeers hands gossip the peers of nodes when they changed.
func (a *Agent) setPeers(nodes []corev1.Node) {
	peers := convert.PeersOf(nodes, a.cfg.NodeName, a.cfg.GossipPort)
	slices.Sort(peers)
	if !slices.Equal(peers, a.loop.peers) {
		a.loop.peers = peers
		a.ready.Peers.Store(int32(gossip.SetPeers(a.deps.Members, nodes, a.cfg.NodeName, a.cfg.GossipPort)))
	}
}

// view is what the published decision shows besides the owners: it is
// compared before and after a pass to tell an urgent publish.
type view struct {
	listen     []announce.Interface
	names      []string
	capability *announce.Capability
	prefixes   map[int][]string
	found      bool
}

func (a *Agent) viewNow() view {
	return view{names: a.loop.state.Members(), listen: a.loop.state.Listen(), capability: a.ownCapability(),
		prefixes: a.loop.prefixes, found: a.ready.NodeFound.Load()}
}

// differs reports whether what the L2Announcer shows changed.
func (v view) differs(o view) bool {
	return v.found != o.found || !slices.Equal(v.names, o.names) || !slices.Equal(v.listen, o.listen) ||
		!reflect.DeepEqual(v.capability, o.capability) || !maps.EqualFunc(v.prefixes, o.prefixes, slices.Equal[[]string])
}

// decide brings the decision up to date with what changed since the last
// call (everything, the first time): caches and gossip in, responder table
// out. A Service event re-decides that Service's addresses only.
func (a *Agent) decide(ctx context.Context) error {
	start := a.deps.Clock.Now()
	if a.loop.state == nil {
		a.loop.state = announce.NewState(a.cfg.NodeName)
	}
	d := a.dirty.take()
	if a.resumed(ctx) { // a stall made the decision stale
		d.nodes = true
	}
	if a.leave.leaving() && !a.loop.leaving { // SIGTERM: hand everything over (leave.go)
		a.loop.leaving, d.nodes = true, true
	}
	before := a.viewNow()
	pass := &backend.Pass{}
	changes, err := a.update(ctx, d, pass)
	if err != nil {
		// Read again next time; what changed before the error still
		// reaches the responder and the status below.
		a.dirty.mark(func(c *changed) { c.merge(d) })
		if !a.loop.applied { // never start from a partial view
			a.publishMeta()
			a.loop.pending = append(a.loop.pending, changes...)
			return err
		}
	}
	a.applyToResponder(changes)
	if len(changes) >= manyChanges {
		a.log.Debug("many changes handed to the responder", "changes", len(changes), "after", a.deps.Clock.Since(start).Round(time.Millisecond))
	}
	a.publishMeta()
	a.afterApply(ctx)
	a.elig.ConfirmApplied(a.gossip()) // only now may peers' returning nodes take
	a.ready.Decided.Store(true)       // the agent serves from now on (health)
	if a.loop.leaving {
		// Peers report the moves; backends stop with the agent (BGP's
		// graceful restart keeps its routes).
		a.leave.done()
		return err
	}
	a.passToBackends(pass, changes)
	a.met.decisions.Observe(a.deps.Clock.Since(start).Seconds())
	a.loop.pending = append(a.loop.pending, changes...)
	// What the L2Announcer shows (members, interfaces), moves and losses
	// are published at once; new addresses may wait.
	urgent := d.all || d.policies || before.differs(a.viewNow()) ||
		slices.ContainsFunc(changes, func(c announce.Change) bool { return c.From != "" }) ||
		!maps.Equal(a.unanswered(), a.loop.unanswered)
	if len(a.loop.pending) == 0 && !urgent {
		return err
	}
	if !urgent && a.deps.Clock.Since(a.loop.published) < a.loop.publishEvery {
		return err // new addresses only: published with the next batch
	}
	a.publish()
	return err
}

// publishMeta publishes the gossip metadata this pass computed, if any.
func (a *Agent) publishMeta() {
	if a.loop.meta == nil {
		return
	}
	if g := a.gossip(); g != nil {
		a.elig.Publish(g, *a.loop.meta)
	}
	a.loop.meta = nil
}

// afterApply follows the responder's update: a hand-over begun in this
// pass ends at the latest after TakeMaxWait (handing.go), and a take this
// pass made is told to the peers that kept answering until now.
func (a *Agent) afterApply(ctx context.Context) {
	clear(a.loop.claims)
	if a.loop.handingStarted {
		wait := a.cfg.TakeMaxWait
		if a.loop.lettingGo {
			wait = a.cfg.LetGoWait
			a.log.Info("this node stops serving: answering for its addresses with their new owners' MACs while they take them", "node (the last)", a.loop.handedTo,
				"addresses", a.loop.handedN, "for", wait, "leaving", a.loop.leaving)
		} else {
			a.log.Info("answering for addresses handed to a returning node until it took them", "node", a.loop.handedTo,
				"addresses", a.loop.handedN, "with its MAC", a.loop.claimedN)
		}
		a.loop.handingStarted, a.loop.handedN, a.loop.claimedN = false, 0, 0
		a.triggerAfter(ctx, wait+10*time.Millisecond)
	}
	if since, ok := a.elig.Returning.Took(); ok {
		if t, ok := a.deps.Members.(interface{ Took(since int64) }); ok {
			t.Took(since)
		}
	}
}

// passToBackends completes the pass and hands it to every backend.
func (a *Agent) passToBackends(pass *backend.Pass, changes []announce.Change) {
	if len(a.deps.Backends) == 0 {
		return
	}
	pass.Members = a.loop.state.Members()
	pass.Capabilities = a.loop.state.Capabilities()
	pass.Changes = changes
	_, self := pass.Capabilities[a.cfg.NodeName]
	pass.Serving = !a.ready.Holding.Load() && (pass.Capabilities == nil || self)
	for _, b := range a.deps.Backends {
		b.Pass(pass)
	}
}

// publish hands the whole decision to the status writer and the safety
// checks, and reports the changes since the last publish. At 10,000
// Services materialising the decision costs milliseconds, so during a
// burst of new Services it happens at most every publishEvery; a move, a
// loss or a Node, policy or interface change publishes at once. The
// responder never waits for it.
func (a *Agent) publish() {
	res := a.loop.state.Result()
	a.report(a.loop.pending, res)
	a.events.Add(status.ChangeEvents(a.loop.pending, res, a.cfg.NodeName)...)
	a.loop.pending = nil
	a.loop.published = a.deps.Clock.Now()
	a.loop.prev = res
	a.loop.unanswered = a.unanswered()
	a.toStatus.Put(status.Decision{Res: res, Members: a.loop.state.Members(), Capability: a.ownCapability(),
		Prefixes: a.loop.prefixes, Applied: a.loop.appliedCfg, Unanswered: a.loop.unanswered})
	a.toSafety.Put(res)
	a.toProbe.Put(res)
	a.toSnapshot.Put(res)
}

// ownCapability is this node's capability in the decision, nil if none.
func (a *Agent) ownCapability() *announce.Capability {
	if c, ok := a.loop.state.Capabilities()[a.cfg.NodeName]; ok {
		return &c
	}
	return nil
}

// update feeds the state what d names as changed, in order, and returns
// the changes, also those made before an error (the state has them). What
// members can serve goes in first, members second: a member that leaves
// keeps its capability, so its loss stays an incremental change.
func (a *Agent) update(ctx context.Context, d changed, pass *backend.Pass) ([]announce.Change, error) {
	var changes []announce.Change
	for _, step := range []func() ([]announce.Change, error){
		func() ([]announce.Change, error) { return a.updateNodes(ctx, d, pass) },
		func() ([]announce.Change, error) { return a.updatePolicies(ctx, d) },
		func() ([]announce.Change, error) { return a.updateLinks(d), nil },
		func() ([]announce.Change, error) { return a.updateCapabilities(ctx, d) },
		func() ([]announce.Change, error) { return a.loop.state.SetMembers(a.deps.Members.Members()), nil },
		func() ([]announce.Change, error) { return a.updateServices(ctx, d, pass) },
	} {
		ch, err := step()
		changes = append(changes, ch...)
		if err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// updateNodes re-reads the Nodes when they changed: gossip's peers, this
// agent's own Node, the state's node labels.
func (a *Agent) updateNodes(ctx context.Context, d changed, pass *backend.Pass) ([]announce.Change, error) {
	if !d.nodes {
		return nil, nil
	}
	var nodes corev1.NodeList
	if err := a.deps.Reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Nodes from the cache: %w", err)
	}
	a.setPeers(nodes.Items)
	a.nodeSeen(ctx, nodes.Items)
	pass.Nodes = convert.Nodes(nodes.Items)
	return a.loop.state.SetNodes(pass.Nodes), nil
}

// updatePolicies re-reads the policies when they changed.
func (a *Agent) updatePolicies(ctx context.Context, d changed) ([]announce.Change, error) {
	if !d.policies {
		return nil, nil
	}
	var pols mooringv1.L2AnnouncementPolicyList
	if err := a.deps.Reader.List(ctx, &pols, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing L2AnnouncementPolicies from the cache: %w", err)
	}
	a.loop.appliedCfg = status.AppliedConfig(pols.Items)
	return a.loop.state.SetPolicies(convert.Policies(pols.Items)), nil
}

// updateLinks re-reads the interfaces and their networks when they
// changed; a failed read keeps the last ones.
func (a *Agent) updateLinks(d changed) []announce.Change {
	if !d.links {
		return nil
	}
	var changes []announce.Change
	if ifaces, err := a.deps.Links.Interfaces(); err != nil {
		a.log.Warn("listing interfaces; keeping the last list", "err", err)
	} else {
		changes = a.loop.state.SetInterfaces(ifaces)
	}
	if ps, err := a.deps.Links.Prefixes(); err != nil {
		a.log.Warn("listing interface addresses; keeping the last networks", "err", err)
	} else {
		next := map[int][]string{}
		for idx, addrs := range ps {
			if nets := eligibility.NetworkPrefixes(addrs); len(nets) > 0 {
				next[idx] = nets
			}
		}
		a.loop.prefixes = next
	}
	return changes
}

// updateCapabilities feeds the state what every member can serve
// (capabilities.go).
func (a *Agent) updateCapabilities(ctx context.Context, d changed) ([]announce.Change, error) {
	caps, err := a.capabilities(ctx, d)
	if err != nil {
		return nil, err
	}
	return a.loop.state.SetCapabilities(caps), nil
}

// updateServices re-reads every Service (start-up, a relist) or those
// named; the pass gets what was read.
func (a *Agent) updateServices(ctx context.Context, d changed, pass *backend.Pass) ([]announce.Change, error) {
	if d.all {
		return a.syncAllServices(ctx, pass)
	}
	var changes []announce.Change
	for k := range d.services {
		ch, err := a.syncService(ctx, k, pass)
		changes = append(changes, ch...)
		if err != nil {
			return changes, err
		}
	}
	return changes, nil
}

// syncService re-reads one Service and its EndpointSlices from the cache.
func (a *Agent) syncService(ctx context.Context, k types.NamespacedName, pass *backend.Pass) ([]announce.Change, error) {
	key := announce.ServiceKey{Namespace: k.Namespace, Name: k.Name}
	svc, ok, err := a.readService(ctx, k)
	switch {
	case err != nil:
		return nil, err
	case !ok:
		pass.Deleted = append(pass.Deleted, key)
		return a.loop.state.DeleteService(key), nil
	}
	p := &svc // shared by the L2 state and the backends, never modified
	pass.Services = append(pass.Services, p)
	return a.loop.state.SetService(p), nil
}

// readService reads one Service, converted: straight from the compact
// store when the reader has one, else from the objects.
func (a *Agent) readService(ctx context.Context, k types.NamespacedName) (announce.Service, bool, error) {
	if cs := store.Of(a.deps.Reader); cs != nil {
		svc, ok := cs.Service(k)
		return svc, ok, nil
	}
	var svc corev1.Service
	if err := a.deps.Reader.Get(ctx, k, &svc); apierrors.IsNotFound(err) {
		return announce.Service{}, false, nil
	} else if err != nil {
		return announce.Service{}, false, fmt.Errorf("reading Service %s from the cache: %w", k, err)
	}
	var es discoveryv1.EndpointSliceList
	if err := a.deps.Reader.List(ctx, &es, client.InNamespace(k.Namespace), client.MatchingFields{store.IndexSliceService: k.Name},
		client.UnsafeDisableDeepCopy); err != nil {
		return announce.Service{}, false, fmt.Errorf("listing the EndpointSlices of %s from the cache: %w", k, err)
	}
	return convert.Service(&svc, convert.ReadyNodes(es.Items)[convert.Key(&svc)]), true, nil
}

// syncAllServices reads every Service (start-up): the first decision must
// see complete caches, or it would withdraw addresses for a moment.
func (a *Agent) syncAllServices(ctx context.Context, pass *backend.Pass) ([]announce.Change, error) {
	all, err := a.readAllServices(ctx)
	if err != nil {
		return nil, err
	}
	pass.Full = true
	return a.setAllServices(all, pass), nil
}

// readAllServices reads every Service, converted.
func (a *Agent) readAllServices(ctx context.Context) ([]announce.Service, error) {
	if cs := store.Of(a.deps.Reader); cs != nil {
		return cs.Services(), nil
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
	ready := convert.ReadyNodes(es.Items)
	all := make([]announce.Service, 0, len(svcs.Items))
	for i := range svcs.Items {
		svc := &svcs.Items[i]
		all = append(all, convert.Service(svc, ready[convert.Key(svc)]))
	}
	return all, nil
}

// setAllServices makes svcs the state's Services and the pass's. The
// state and the backends keep pointers into svcs: its array lives while
// one of them is not yet replaced, the size of the copies it saves.
func (a *Agent) setAllServices(svcs []announce.Service, pass *backend.Pass) []announce.Change {
	seen := make(map[announce.ServiceKey]bool, len(svcs))
	var changes []announce.Change
	pass.Services = make([]*announce.Service, 0, len(svcs))
	for i := range svcs {
		p := &svcs[i]
		seen[p.Key] = true
		pass.Services = append(pass.Services, p)
		changes = append(changes, a.loop.state.SetService(p)...)
	}
	for _, k := range a.loop.state.ServiceKeys() {
		if !seen[k] {
			pass.Deleted = append(pass.Deleted, k)
			changes = append(changes, a.loop.state.DeleteService(k)...)
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
	a.reportProblems(res.Problems)
}

// reportProblems logs each announcement problem once, when it appears.
func (a *Agent) reportProblems(problems []announce.Problem) {
	if slices.Equal(problems, a.loop.problems) {
		return
	}
	for _, p := range problems {
		if !slices.Contains(a.loop.problems, p) {
			a.log.Warn("announcement problem", "policy", p.Policy, "addr", p.Addr, "field", p.Field, "problem", p.Message)
		}
	}
	a.loop.problems = problems
}

// unansweredResponder is the responder's report of the interfaces it
// cannot answer on (responder.Manager).
type unansweredResponder interface {
	Unanswered() map[int]string
	UnansweredChanges() <-chan struct{}
}

// unanswered is what the responder cannot answer on now (nil: all of it,
// or a responder that does not say).
func (a *Agent) unanswered() map[int]string {
	if r, ok := a.deps.Responder.(unansweredResponder); ok {
		return r.Unanswered()
	}
	return nil
}

// unansweredChanges fires when unanswered changes (nil: never).
func (a *Agent) unansweredChanges() <-chan struct{} {
	if r, ok := a.deps.Responder.(unansweredResponder); ok {
		return r.UnansweredChanges()
	}
	return nil
}
