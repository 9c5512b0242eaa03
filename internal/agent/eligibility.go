package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
)

// Eligibility: a node is a candidate for an address only if it can serve
// it. Each agent works out where it can answer (usableLinks), publishes it
// in its gossip metadata (membership.NodeMeta), and hands the core every
// live member's published capability (announce.Capabilities), so all
// agents rank the same candidates. A node that cannot serve a policy that
// selects it says so: a metric, a log line and a Warning Event on its Node.

// Gossip is what eligibility needs from membership besides Members; the
// real *membership.Membership has it. Without it (test fakes) every live
// member stays eligible, as before capabilities.
type Gossip interface {
	Snapshot() []membership.Member
	SetMeta(membership.NodeMeta) error
	// Generation changes whenever the live set or a member's metadata does.
	Generation() uint64
}

// linkInspector is a Links that can describe links for usableLinks.
type linkInspector interface {
	Inspect() ([]LinkInfo, error)
}

// reasonStarting is what an agent publishes from its first gossip until its
// first decision; coldStartWindow is how long after its own start an agent
// still counts such peers as candidates (see capabilities).
const (
	reasonStarting  = "starting"
	coldStartWindow = 10 * time.Second
)

// EventReasonCannotAnnounce is the Node Event of a node that a policy
// selects but that has no usable interface the policy allows.
const EventReasonCannotAnnounce = "CannotAnnounce"

type eligibility struct {
	met  eligibilityMetrics
	node string
	log  *slog.Logger

	// Owned by the decision loop.
	born         time.Time                      // wall clock at New: peers' Since is compared with it
	started      bool                           // the first decision has run
	returning    bool                           // a peer was ready since before this agent started (a restart)
	excluded     bool                           // this Node has the exclude-from-external-load-balancers label
	readyAt      time.Time                      // the end of the hold-down, by the agent's clock (zero: none)
	since        int64                          // wall clock (Unix s) when first ready, published
	takeAt       time.Time                      // when this node may take addresses at the earliest, by the agent\'s clock
	takeBy       time.Time                      // when it takes them even unconfirmed (TakeMaxWait)
	taking       bool                           // returning, ready, waiting for its peers to confirm
	counting     []string                       // the Taking members the last caps count (peer side)
	confirmed    []string                       // what this node publishes in Counted: applied
	pubMeta      membership.NodeMeta            // the last metadata computed, Counted aside
	gen          uint64                         // gossip generation caps were computed at
	caps         announce.Capabilities          // the last result
	last         map[string]announce.Capability // every node's last known capability
	local        announce.Capability
	meta         membership.NodeMeta
	published    []byte
	unservable   string // last reported, to log and record once per change
	otherRanking string
	unusable     string

	events *mailbox[event]
}

type eligibilityMetrics struct {
	deferringNow                                          bool
	eligible, usable, unservable, otherRanking, deferring prometheus.Gauge
	takeUnconfirmed                                       prometheus.Counter
}

// newEligibility also publishes "not ready yet", so that from its first
// gossip on this agent is no candidate until it has decided once: an empty
// metadata would read as an older agent's, which is a candidate.
func newEligibility(node string, log *slog.Logger, reg prometheus.Registerer, members Members) *eligibility {
	g := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	e := &eligibility{node: node, log: log, born: time.Now(), events: newMailbox[event](), met: eligibilityMetrics{
		eligible: g("mooring_agent_eligible", "1 if this node is a candidate for addresses (agent ready, a usable interface, no exclude-from-external-load-balancers label), else 0."),
		usable:   g("mooring_agent_usable_interfaces", "Interfaces this node may answer ARP/NDP on (up, ARP, Ethernet, not a bridge/bond port or pod veth)."),
		unservable: g("mooring_agent_unservable_policies",
			"L2AnnouncementPolicies that select this node but allow none of its usable interfaces: it is no candidate for their addresses (see the node's CannotAnnounce Event)."),
		deferring: g("mooring_agent_partition_deferring",
			"1 while gossip is cut from most nodes whose kernels still answer (a partition) and this side, not being the majority, announces nothing."),
		otherRanking: g("mooring_agent_members_other_ranking",
			"Live members that rank with another hash version (a mixed-version cluster): owners may disagree until every agent runs one version."),
		takeUnconfirmed: prometheus.NewCounter(prometheus.CounterOpts{Name: "mooring_agent_take_unconfirmed_total",
			Help: "Times this returning agent took its addresses after the maximum wait without every ready peer confirming it had let them go (a stuck or older peer)."}),
	}}
	if reg != nil {
		reg.MustRegister(e.met.eligible, e.met.usable, e.met.unservable, e.met.otherRanking, e.met.deferring, e.met.takeUnconfirmed)
	}
	if g, ok := members.(Gossip); ok {
		if err := g.SetMeta(membership.NodeMeta{Ranking: announce.RankingVersion(), Reason: reasonStarting}); err != nil {
			log.Warn("publishing node metadata", "err", err)
		}
	}
	return e
}

// capabilities publishes this node's capability and returns every
// member's, or nil (no filter) when gossip or links cannot say. It is
// called on every decision but recomputes only when gossip (membership or
// metadata), the links, the Nodes or the policies changed. A member that
// left keeps its last capability (State.SetCapabilities says why).
func (a *Agent) capabilities(ctx context.Context, d changed) (announce.Capabilities, error) {
	// Called from every decision, after the start-up gate: the agent
	// serves from now on (health.go).
	a.ready.decided.Store(true)
	g, ok := a.deps.Members.(Gossip)
	insp, ok2 := a.deps.Links.(linkInspector)
	if !ok || !ok2 {
		return nil, nil
	}
	e := a.elig
	if d, ok := a.deps.Members.(interface{ Deferring() bool }); ok {
		deferring := d.Deferring()
		if deferring != (e.met.deferringNow) {
			e.met.deferringNow = deferring
			e.met.deferring.Set(b2f(deferring))
			a.log.Warn("gossip partition: this side is not the majority", "deferring", deferring, "members", a.deps.Members.Members())
		}
	}
	gen := g.Generation()
	if e.caps != nil && gen == e.gen && !d.all && !d.nodes && !d.policies && !d.links {
		return e.caps, nil
	}
	e.gen = gen
	var nodes corev1.NodeList
	if err := a.deps.Reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing Nodes from the cache: %w", err)
	}
	var pols mooringv1.L2AnnouncementPolicyList
	if err := a.deps.Reader.List(ctx, &pols, client.UnsafeDisableDeepCopy); err != nil {
		return nil, fmt.Errorf("listing L2AnnouncementPolicies from the cache: %w", err)
	}
	excluded := map[string]bool{}
	var self *corev1.Node
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if _, ok := n.Labels[corev1.LabelNodeExcludeBalancers]; ok {
			excluded[n.Name] = true
		}
		if n.Name == a.cfg.NodeName {
			self = n
		}
	}
	if d.all || d.nodes || d.links || e.caps == nil {
		e.local, e.meta = a.localCapability(insp, self)
	}
	converted := convertPolicies(pols.Items)
	meta := e.meta
	a.excludedReturn(ctx, excluded[a.cfg.NodeName]) // handoff.go
	holding := a.holdDown(ctx, g, &meta)
	a.ready.holding.Store(holding) // health.go
	if excluded[a.cfg.NodeName] {
		meta.Ready = false
		meta.Reason = "the Node has the label " + corev1.LabelNodeExcludeBalancers
	}
	meta.Confirms = true
	e.pubMeta = meta
	meta.Counted = e.confirmed // what the responder has applied (confirmApplied)
	meta = meta.FitCounted()
	if b, err := meta.Encode(); err == nil && string(b) != string(e.published) {
		if err := g.SetMeta(meta); err != nil {
			a.log.Warn("publishing what this node can serve", "err", err)
		} else {
			e.published = b
		}
	}

	if e.last == nil {
		e.last = map[string]announce.Capability{}
	}
	var other, taking []string
	for _, m := range g.Snapshot() {
		if m.Name != a.cfg.NodeName && m.MetaErr == nil && m.Meta.Ready && m.Meta.Taking {
			taking = append(taking, m.Name)
		}
		switch {
		case m.Name == a.cfg.NodeName:
		case errors.Is(m.MetaErr, membership.ErrNoMeta):
			e.last[m.Name] = announce.Capability{Any: true}
		case m.MetaErr == nil && m.Meta.Reason == reasonStarting && time.Since(e.born) < coldStartWindow:
			// A cold start (this agent started moments ago too): every
			// agent is starting, and counting only the ready ones would
			// move addresses as each becomes ready. Optimistic, as before
			// capabilities; a restart into a running cluster is not this.
			e.last[m.Name] = announce.Capability{Any: true}
		case m.MetaErr != nil || !m.Meta.Ready:
			delete(e.last, m.Name) // not ready (restarting, holding down): no candidate
		default:
			e.last[m.Name] = announce.Capability{Interfaces: m.Meta.Interfaces, Defaults: m.Meta.Defaults}
		}
		if m.MetaErr == nil && !announce.RankingAgrees(m.Meta.Ranking, converted) {
			other = append(other, m.Name+"="+m.Meta.Ranking)
		}
	}
	e.last[a.cfg.NodeName] = e.local
	if holding {
		delete(e.last, a.cfg.NodeName)
	}
	caps := announce.Capabilities{}
	for i := range nodes.Items {
		n := nodes.Items[i].Name
		// A peer that publishes its readiness says itself when the label
		// excludes it (after letting its addresses go: break before make);
		// the label decides only for this node and older agents.
		if c, ok := e.last[n]; ok && !(excluded[n] && (n == a.cfg.NodeName || c.Any)) {
			caps[n] = c
		}
	}
	for n := range e.last { // forget nodes that are gone
		if !slices.ContainsFunc(nodes.Items, func(x corev1.Node) bool { return x.Name == n }) {
			delete(e.last, n)
		}
	}
	e.caps = caps
	e.counting = e.counting[:0:0]
	for _, n := range taking { // sorted: Snapshot is
		if _, ok := caps[n]; ok && len(e.counting) < membership.MaxCounted {
			e.counting = append(e.counting, n)
		}
	}
	a.reportEligibility(self, caps, converted, other)
	return caps, nil
}

// holdDown decides, at the first decision, whether this agent is coming
// back to a cluster that has been serving without it (a peer ready since
// before it started): then it stays no candidate for --hold-down, so the
// node's own data path (kube-proxy rules, routes) settles before it pulls
// addresses back, and a flapping node does not pull them back and forth.
// At a cold start (no peer ready before us) it serves at once. It sets
// meta's readiness and reports whether the node is held back now.
func (a *Agent) holdDown(ctx context.Context, g Gossip, meta *membership.NodeMeta) bool {
	e := a.elig
	now := a.deps.Clock.Now()
	if !e.started {
		e.started = true
		for _, m := range g.Snapshot() {
			// Ready since before this process started (with slack for
			// clock skew and simultaneous starts): not a cold start, the
			// cluster has been serving without this node.
			if m.Name != a.cfg.NodeName && m.MetaErr == nil && m.Meta.Ready && m.Meta.Since > 0 &&
				time.Unix(m.Meta.Since, 0).Before(e.born.Add(-2*time.Second)) {
				e.returning = true
				e.readyAt = now.Add(a.cfg.HoldDown)
				a.log.Info("peers have served without this node: holding back before taking addresses", "for", a.cfg.HoldDown, "peer", m.Name)
				a.triggerAfter(ctx, a.cfg.HoldDown)
				break
			}
		}
	}
	if now.Before(e.readyAt) {
		meta.Ready = false
		meta.Reason = fmt.Sprintf("holding down for %s after start: the cluster served without this node", a.cfg.HoldDown)
		return true
	}
	if meta.Ready && e.since == 0 {
		e.since = time.Now().Unix()
		if e.returning {
			// Ready is published now (with Taking); a returning node
			// takes its addresses once every ready peer has confirmed,
			// in its own metadata published after its responder applied
			// the decision, that it counts this node: it has let them go.
			// Taking them first would leave a peer answering beside it,
			// and were this node to die before its readiness spread,
			// that peer would never re-announce them (it never saw them
			// move). TakeDelay is the least wait, TakeMaxWait the most (a
			// stuck or older peer). At a cold start peers count it
			// already (capabilities), so it takes them at once.
			e.taking = true
			e.takeAt = now.Add(a.cfg.TakeDelay)
			e.takeBy = now.Add(max(a.cfg.TakeMaxWait, a.cfg.TakeDelay))
			a.triggerAfter(ctx, a.cfg.TakeDelay)
			a.triggerAfter(ctx, e.takeBy.Sub(now))
		}
	}
	meta.Since = e.since
	if e.taking {
		switch awaited := unconfirmed(a.cfg.NodeName, g.Snapshot()); takeDecision(now, e.takeAt, e.takeBy, awaited) {
		case takeWait:
			meta.Taking = true
			return true
		case takeConfirmed:
			a.log.Info("every ready peer has let this node's addresses go: taking them", "after", now.Sub(e.takeAt)+a.cfg.TakeDelay)
		case takeUnconfirmed:
			e.met.takeUnconfirmed.Inc()
			a.log.Warn("taking addresses without every peer's confirmation: the maximum wait passed", "waited", max(a.cfg.TakeMaxWait, a.cfg.TakeDelay), "unconfirmed", awaited)
		}
		e.taking = false
	}
	return false
}

// What a returning node does about its addresses (takeDecision).
const (
	takeWait = iota
	takeConfirmed
	takeUnconfirmed
)

// takeDecision: a returning node waits at least until takeAt, then until
// no peer is awaited, but never past takeBy.
func takeDecision(now, takeAt, takeBy time.Time, awaited []string) int {
	switch {
	case now.Before(takeAt):
		return takeWait
	case len(awaited) == 0:
		return takeConfirmed
	case now.Before(takeBy):
		return takeWait
	}
	return takeUnconfirmed
}

// unconfirmed returns the live peers that serve (ready, not leaving) but
// have not confirmed that they count self: an agent that publishes no
// confirmations (older) or whose metadata cannot be read is awaited too,
// so only the maximum wait ends the wait for it.
func unconfirmed(self string, members []membership.Member) []string {
	var out []string
	for _, m := range members {
		switch {
		case m.Name == self:
		case m.MetaErr != nil && !errors.Is(m.MetaErr, membership.ErrNoMeta):
			out = append(out, m.Name)
		case errors.Is(m.MetaErr, membership.ErrNoMeta):
			if !m.Meta.Leaving {
				out = append(out, m.Name) // an older agent: a candidate for everything
			}
		case !m.Meta.Ready || m.Meta.Leaving:
			// Serves nothing: not a candidate in anyone's ranking.
		case !m.Meta.Confirms || !m.Meta.Counts(self):
			out = append(out, m.Name)
		}
	}
	return out
}

// confirmApplied publishes, once the responder has been handed the
// decision (agent.go decide), which returning members that decision
// counts: they may take their addresses, this node has let them go.
func (a *Agent) confirmApplied() {
	g, ok := a.deps.Members.(Gossip)
	e := a.elig
	if !ok || e == nil || slices.Equal(e.counting, e.confirmed) {
		return
	}
	e.confirmed = slices.Clone(e.counting)
	meta := e.pubMeta
	meta.Counted = e.confirmed
	meta = meta.FitCounted()
	b, err := meta.Encode()
	if err != nil {
		a.log.Warn("publishing which returning nodes this node counts", "err", err)
		return
	}
	if string(b) == string(e.published) {
		return
	}
	if err := g.SetMeta(meta); err != nil {
		a.log.Warn("publishing which returning nodes this node counts", "err", err)
		return
	}
	e.published = b
}

// triggerAfter re-decides after d (bounded by ctx: Run's).
func (a *Agent) triggerAfter(ctx context.Context, d time.Duration) {
	timer := a.deps.Clock.After(d)
	go func() {
		select {
		case <-ctx.Done():
		case <-timer:
			a.Trigger()
		}
	}()
}

// localCapability works out where this node can answer, and the metadata
// that says so.
func (a *Agent) localCapability(insp linkInspector, self *corev1.Node) (announce.Capability, membership.NodeMeta) {
	meta := membership.NodeMeta{Ranking: announce.RankingVersion(), Ready: true}
	links, err := insp.Inspect()
	if err != nil {
		a.log.Warn("inspecting interfaces; serving nothing until it works", "err", err)
		meta.Reason = "cannot list interfaces: " + err.Error()
		return announce.Capability{}, meta
	}
	usable, defaults, unusable := usableLinks(links, a.nodeIPs(self))
	meta.Interfaces, meta.Defaults = usable, defaults
	switch {
	case len(usable) == 0:
		meta.Reason = "no usable interface"
	case len(defaults) == 0:
		meta.Reason = whyNoNodeIPs
	}
	if s := fmt.Sprint(unusable); s != a.elig.unusable {
		a.elig.unusable = s
		a.log.Info("interfaces", "usable", usable, "defaults", defaults, "left out", unusable)
	}
	a.elig.met.usable.Set(float64(len(usable)))
	return announce.Capability{Interfaces: usable, Defaults: defaults}, meta
}

// nodeIPs are the node's InternalIP addresses, and the gossip bind address
// (status.hostIP) when it is one.
func (a *Agent) nodeIPs(self *corev1.Node) []netip.Addr {
	var out []netip.Addr
	if self != nil {
		out = internalIPs(self)
	}
	if ip, err := netip.ParseAddr(a.cfg.GossipBind); err == nil && !ip.IsUnspecified() {
		out = append(out, ip.Unmap())
	}
	return out
}

// reportEligibility sets the metrics and, once per change, logs and
// queues a Node Event naming the policies this node cannot serve.
func (a *Agent) reportEligibility(self *corev1.Node, caps announce.Capabilities, policies []announce.Policy, other []string) {
	e := a.elig
	local, ok := caps[a.cfg.NodeName]
	eligible := ok && (local.Any || len(local.Interfaces) > 0)
	e.met.eligible.Set(b2f(eligible))
	e.met.otherRanking.Set(float64(len(other)))
	if s := strings.Join(other, ","); s != e.otherRanking {
		e.otherRanking = s
		if s != "" {
			a.log.Warn("members rank with another hash version: owners may disagree until every agent runs one version",
				"ours", announce.RankingVersion(), "theirs", other)
		}
	}
	var labels map[string]string
	if self != nil {
		labels = self.Labels
	}
	var cannot []string
	for _, p := range policies {
		if !ok || p.NodeSelector.Validate() != nil || !p.NodeSelector.Matches(labels) || local.Serves(p) {
			continue
		}
		cannot = append(cannot, fmt.Sprintf("%s (spec.interfaces %v)", p.Name, p.Interfaces))
	}
	e.met.unservable.Set(float64(len(cannot)))
	s := strings.Join(cannot, ", ")
	if s == e.unservable {
		return
	}
	e.unservable = s
	if s == "" {
		return
	}
	ifs := "none"
	if len(local.Interfaces) > 0 {
		ifs = strings.Join(local.Interfaces, ", ")
	}
	msg := fmt.Sprintf("%s cannot announce for the L2AnnouncementPolicies %s: none of its usable interfaces (%s; defaults %v) is allowed, "+
		"so it is no candidate for their addresses and the other nodes serve them; fix spec.interfaces or spec.nodeSelector",
		a.cfg.NodeName, s, ifs, local.Defaults)
	a.log.Warn("this node cannot serve some policies that select it", "message", msg)
	if self != nil {
		e.events.put(event{typ: corev1.EventTypeWarning, reason: EventReasonCannotAnnounce, message: msg})
	}
}

// eventLoop records the queued Node Events off the decision loop, so an
// unreachable API server never delays a decision.
func (e *eligibility) eventLoop(ctx context.Context, c client.Client, clk clock.Clock) error {
	if c == nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.events.ready():
		}
		ev, _ := e.events.get()
		now := metav1.NewTime(clk.Now())
		obj := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: e.node + ".", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: e.node, UID: "", Namespace: ""},
			Reason:         ev.reason, Message: ev.message, Type: ev.typ,
			Source:         corev1.EventSource{Component: "mooring-agent", Host: e.node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: "mooring.dev/agent", ReportingInstance: e.node,
		}
		wctx, cancel := context.WithTimeout(ctx, apiTimeout)
		err := c.Create(wctx, obj)
		cancel()
		if err != nil {
			e.log.Warn("recording a Node event failed", "reason", ev.reason, "err", err)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
