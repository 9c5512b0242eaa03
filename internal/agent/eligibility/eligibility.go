package eligibility

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/agent/handoff"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/agent/status"
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

// Inspector describes the node's links for usableLinks (host.Links).
type Inspector interface {
	Inspect() ([]host.LinkInfo, error)
}

// reasonStarting is what an agent publishes from its first gossip until its
// first decision (coldStartPeer says when peers count it meanwhile).
const reasonStarting = "starting"

// reasonLeaving is what a stopping agent publishes: not ready, so its
// peers take its addresses while it still answers for them.
const reasonLeaving = "leaving: the agent is stopping"

// EventReasonCannotAnnounce is the Node Event of a node that a policy
// selects but that has no usable interface the policy allows.
const EventReasonCannotAnnounce = "CannotAnnounce"

// Config is what eligibility is told.
type Config struct {
	// Node is this node's name; GossipBind the gossip bind address (a
	// node address too, unless unspecified).
	Node, GossipBind string
	Handoff          handoff.Config
}

// Eligibility works out every member's capability. The decision loop owns
// it: no method is safe for concurrent use but RunEvents.
type Eligibility struct {
	cfg Config
	met metrics
	log *slog.Logger
	// Returning is this node's hand-off state (hold-down and take).
	Returning *handoff.Returning

	gen          uint64                         // gossip generation caps were computed at
	caps         announce.Capabilities          // the last result
	last         map[string]announce.Capability // every node's last known capability
	local        announce.Capability
	meta         membership.NodeMeta
	pubMeta      membership.NodeMeta // the last metadata computed, Counted aside
	published    []byte
	counting     []string                       // the Taking members the last caps count (peer side)
	peerMeta     map[string]membership.NodeMeta // what each live peer publishes (PeerMAC)
	confirmed    []string                       // what this node publishes in Counted: applied
	deferringNow bool
	noMeta       map[string]bool // members without metadata now, logged once
	unservable   string          // last reported, to log and record once per change
	otherRanking string
	unusable     string

	events *mailbox.Box[status.Event]
}

type metrics struct {
	eligible, usable, unservable, otherRanking, deferring prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	f := promauto.With(reg)
	g := func(name, help string) prometheus.Gauge {
		return f.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	return metrics{
		eligible: g("mooring_agent_eligible", "1 if this node is a candidate for addresses (agent ready, a usable interface, no exclude-from-external-load-balancers label), else 0."),
		usable:   g("mooring_agent_usable_interfaces", "Interfaces this node may answer ARP/NDP on (up, ARP, Ethernet, not a bridge/bond port or pod veth)."),
		unservable: g("mooring_agent_unservable_policies",
			"L2AnnouncementPolicies that select this node but allow none of its usable interfaces: it is no candidate for their addresses (see the node's CannotAnnounce Event)."),
		deferring: g("mooring_agent_partition_deferring",
			"1 while gossip is cut from most nodes whose kernels still answer (a partition) and this side, not being the majority, announces nothing."),
		otherRanking: g("mooring_agent_members_other_ranking",
			"Live members that rank with another hash version (a mixed-version cluster): owners may disagree until every agent runs one version."),
	}
}

// New also publishes "not ready yet" through g (nil: no gossip metadata),
// so that from its first gossip on this agent is no candidate until it has
// decided once (a member without metadata is none either). born is the
// agent's start (wall clock).
func New(cfg Config, born time.Time, log *slog.Logger, reg prometheus.Registerer, g Gossip) *Eligibility {
	e := &Eligibility{cfg: cfg, log: log, met: newMetrics(reg), events: mailbox.New[status.Event](),
		Returning: handoff.NewReturning(cfg.Handoff, born, log, reg)}
	if g != nil {
		if err := g.SetMeta(membership.NodeMeta{Ranking: announce.RankingVersion(), Reason: reasonStarting, Born: born.UnixMilli()}); err != nil {
			log.Warn("publishing node metadata", "err", err)
		}
	}
	return e
}

// NoteDeferring sets the partition gauge and logs a change of this side's
// deferral (internal/agent/gossip).
func (e *Eligibility) NoteDeferring(deferring bool, members []string) {
	if deferring == e.deferringNow {
		return
	}
	e.deferringNow = deferring
	e.met.deferring.Set(b2f(deferring))
	e.log.Warn("gossip partition: this side is not the majority", "deferring", deferring, "members", members)
}

// Current reports whether the last capabilities still hold: gossip
// (membership or metadata) is at generation gen and neither the Nodes, the
// policies nor the links changed. It returns them then.
func (e *Eligibility) Current(gen uint64, changed bool) (announce.Capabilities, bool) {
	if e.caps == nil || gen != e.gen || changed {
		return nil, false
	}
	return e.caps, true
}

// Input is one pass's input to Compute.
type Input struct {
	// Now is the agent's clock, Wall the wall clock (gossip's Since).
	Now, Wall time.Time
	// Gen is the gossip generation Members were read at.
	Gen     uint64
	Members []membership.Member
	// Relink: the Nodes or links changed, so the local links are
	// inspected again.
	Relink   bool
	Nodes    []corev1.Node
	Policies []announce.Policy
	// Leaving: the agent is stopping (SIGTERM): no candidate, and it
	// publishes so, while it still answers (docs/l2.md "Planned
	// hand-offs").
	Leaving bool
}

// Output is what Compute decided.
type Output struct {
	// Caps are every candidate's capabilities.
	Caps announce.Capabilities
	// Meta is this node's gossip metadata to publish (Publish).
	Meta membership.NodeMeta
	// Holding: this node is held back (hold-down, take not confirmed).
	Holding bool
	// LettingGo: this node stops serving while it still could (it is
	// leaving, or its Node has the exclude label): it hands its addresses
	// to its peers make-before-break (internal/agent handing.go).
	LettingGo bool
	// Wake are the waits after which to decide again.
	Wake []time.Duration
}

// nodeFacts are what the Nodes say about eligibility.
type nodeFacts struct {
	self     *corev1.Node
	excluded map[string]bool // the exclude-from-external-load-balancers label
	names    map[string]bool
}

func factsOf(nodes []corev1.Node, self string) nodeFacts {
	f := nodeFacts{excluded: map[string]bool{}, names: make(map[string]bool, len(nodes))}
	for i := range nodes {
		n := &nodes[i]
		f.names[n.Name] = true
		if _, ok := n.Labels[corev1.LabelNodeExcludeBalancers]; ok {
			f.excluded[n.Name] = true
		}
		if n.Name == self {
			f.self = n
		}
	}
	return f
}

// Compute works out every member's capability from in, in named steps:
// this node's own capability (re-inspecting its links when they or the
// Nodes changed), its hand-off state, the metadata it publishes, what its
// peers publish, and the candidates. It changes only e; the caller
// publishes Output.Meta (Publish), schedules Output.Wake and records the
// Node Events (RunEvents). A member that left keeps its last capability
// (State.SetCapabilities says why). Cost: O(members + nodes).
func (e *Eligibility) Compute(insp Inspector, in Input) Output {
	e.gen = in.Gen
	facts := factsOf(in.Nodes, e.cfg.Node)
	if in.Relink || e.caps == nil {
		e.local, e.meta = e.localCapability(insp, facts.self)
	}
	out := Output{Meta: e.meta}
	out.Holding, out.Wake = e.handOff(in, facts, &out.Meta)
	if in.Leaving {
		out.Meta.Ready, out.Meta.Leaving = false, true
		out.Meta.Reason = reasonLeaving
	}
	out.LettingGo = in.Leaving || facts.excluded[e.cfg.Node]
	other, taking := e.learnPeers(in, facts)
	out.Caps = e.candidates(facts, out.Holding || in.Leaving)
	e.countTaking(taking, out.Caps)
	e.report(facts.self, out.Caps, in.Policies, other)
	return out
}

// handOff applies this node's hand-off state (exclusion, hold-down, take)
// to meta, the metadata it is about to publish, and returns whether it is
// held back and the waits after which to decide again.
func (e *Eligibility) handOff(in Input, facts nodeFacts, meta *membership.NodeMeta) (bool, []time.Duration) {
	excluded := facts.excluded[e.cfg.Node]
	var wake []time.Duration
	if d := e.Returning.Exclude(in.Now, excluded); d > 0 {
		wake = append(wake, d)
	}
	holding, w := e.Returning.Hold(in.Now, in.Wall, in.Members, meta)
	wake = append(wake, w...)
	if excluded {
		meta.Ready = false
		meta.Reason = "the Node has the label " + corev1.LabelNodeExcludeBalancers
	}
	meta.Confirms = true
	return holding, wake
}

// Publish publishes meta through g when it differs from what was
// published; Counted is what the responder has applied (ConfirmApplied).
func (e *Eligibility) Publish(g Gossip, meta membership.NodeMeta) {
	e.pubMeta = meta
	meta.Counted = e.confirmed
	meta = meta.FitCounted()
	if b, err := meta.Encode(); err == nil && string(b) != string(e.published) {
		if err := g.SetMeta(meta); err != nil {
			e.log.Warn("publishing what this node can serve", "err", err)
		} else {
			e.published = b
		}
	}
}

// learnPeers updates every peer's last known capability from what it
// publishes, and returns the members that rank with another hash version
// and the returning (Taking) ones.
func (e *Eligibility) learnPeers(in Input, facts nodeFacts) (other, taking []string) {
	if e.last == nil {
		e.last = map[string]announce.Capability{}
	}
	var noMeta []string
	e.peerMeta = make(map[string]membership.NodeMeta, len(in.Members))
	for _, m := range in.Members {
		if m.Name != e.cfg.Node && m.MetaErr == nil && m.Meta.Ready && m.Meta.Taking {
			taking = append(taking, m.Name)
		}
		if m.Name != e.cfg.Node && m.MetaErr == nil {
			e.peerMeta[m.Name] = m.Meta
		}
		switch {
		case m.Name == e.cfg.Node:
		case errors.Is(m.MetaErr, membership.ErrNoMeta):
			// Agents publish metadata from their first gossip on
			// (New) since v0.0.2: a member without any is an older
			// agent or a foreign member holding the gossip key.
			// Counting it a candidate for everything would let it
			// take any address: fail closed.
			delete(e.last, m.Name)
			noMeta = append(noMeta, m.Name)
		case m.MetaErr == nil && e.coldStartPeer(m, in):
			e.last[m.Name] = announce.Capability{Any: true}
		case m.MetaErr != nil || !m.Meta.Ready:
			delete(e.last, m.Name) // not ready (restarting, holding down): no candidate
		default:
			e.last[m.Name] = announce.Capability{Interfaces: m.Meta.Interfaces, Defaults: m.Meta.Defaults}
		}
		if m.MetaErr == nil && !announce.RankingAgrees(m.Meta.Ranking, in.Policies) {
			other = append(other, m.Name+"="+m.Meta.Ranking)
		}
	}
	e.noteNoMeta(noMeta)
	for n := range e.last { // forget nodes that are gone
		if !facts.names[n] {
			delete(e.last, n)
		}
	}
	return other, taking
}

// coldStartPeer reports whether m, a peer that publishes it is still
// starting, counts as a candidate for everything: at a cold start every
// agent is starting, and counting only the ready ones would move addresses
// as each becomes ready (optimistic, as before capabilities). A peer that
// comes into a cluster serving without it (a restart) is not: it holds
// down first, and counting it would let its addresses go to a node that
// answers nothing. Both are judged from what the members publish, as the
// peer judges itself (handoff.StartingCandidate); a peer too old to
// publish its start time is judged by this agent's own age, as before.
func (e *Eligibility) coldStartPeer(m membership.Member, in Input) bool {
	if m.Meta.Reason != reasonStarting {
		return false
	}
	if candidate, ok := handoff.StartingCandidate(m, in.Members, in.Wall); ok {
		return candidate
	}
	return in.Wall.Sub(e.Returning.Born()) < handoff.ColdStartWindow
}

// noteNoMeta logs each member of names (the members without metadata
// now) once while it stays without: one that gets metadata and loses it
// again is logged again.
func (e *Eligibility) noteNoMeta(names []string) {
	if len(names) == 0 && len(e.noMeta) == 0 {
		return
	}
	now := make(map[string]bool, len(names))
	for _, n := range names {
		now[n] = true
		if !e.noMeta[n] {
			e.log.Warn("a gossip member publishes no metadata: it is no candidate for any address (an agent older than v0.0.2, or not a Mooring agent; upgrade it, or rotate the gossip key if it is foreign)", "member", n)
		}
	}
	e.noMeta = now
}

// candidates are the Nodes with a known capability: this node's own
// unless it is held back or leaving. A peer that publishes its readiness
// says itself when the label excludes it (it keeps answering, with the new
// owners' MACs, while they take: make before break); the label decides
// only for this node and older agents.
func (e *Eligibility) candidates(facts nodeFacts, holding bool) announce.Capabilities {
	e.last[e.cfg.Node] = e.local
	if holding {
		delete(e.last, e.cfg.Node)
	}
	caps := announce.Capabilities{}
	for n, c := range e.last {
		if facts.names[n] && !(facts.excluded[n] && (n == e.cfg.Node || c.Any)) {
			caps[n] = c
		}
	}
	e.caps = caps
	return caps
}

// countTaking records the returning members caps count (sorted: the
// members are), to confirm once the responder has applied the decision.
func (e *Eligibility) countTaking(taking []string, caps announce.Capabilities) {
	e.counting = e.counting[:0:0]
	for _, n := range taking {
		if _, ok := caps[n]; ok && len(e.counting) < membership.MaxCounted {
			e.counting = append(e.counting, n)
		}
	}
}

// PeerMAC returns the MAC peer publishes for the interface that answers
// where this node's interface ifname does: the one of the same name, else,
// when ifname is one of this node's defaults (the interface carrying its
// node address), the peer's first default. nil when the peer publishes
// none: the hand-over then answers with this node's own MAC.
func (e *Eligibility) PeerMAC(peer, ifname string) net.HardwareAddr {
	m, ok := e.peerMeta[peer]
	if !ok {
		return nil
	}
	if mac := m.MAC(ifname); mac != nil {
		return mac
	}
	if slices.Contains(e.meta.Defaults, ifname) && len(m.Defaults) > 0 {
		return m.MAC(m.Defaults[0])
	}
	return nil
}

// Counts reports whether the last decision counts name as a returning
// (Taking) member: this node keeps answering for the addresses that
// decision gave it until it took them (make before break).
func (e *Eligibility) Counts(name string) bool { return slices.Contains(e.counting, name) }

// ConfirmApplied publishes, once the responder has been handed the
// decision, which returning members that decision counts: they may take
// their addresses, this node has let them go. g nil: no gossip metadata.
func (e *Eligibility) ConfirmApplied(g Gossip) {
	if g == nil || slices.Equal(e.counting, e.confirmed) {
		return
	}
	e.confirmed = slices.Clone(e.counting)
	if len(e.confirmed) > 0 {
		e.log.Info("confirming to returning nodes that this node let their addresses go", "nodes", e.confirmed)
	}
	meta := e.pubMeta
	meta.Counted = e.confirmed
	meta = meta.FitCounted()
	b, err := meta.Encode()
	if err != nil {
		e.log.Warn("publishing which returning nodes this node counts", "err", err)
		return
	}
	if string(b) == string(e.published) {
		return
	}
	if err := g.SetMeta(meta); err != nil {
		e.log.Warn("publishing which returning nodes this node counts", "err", err)
		return
	}
	e.published = b
}

// localCapability works out where this node can answer, and the metadata
// that says so.
func (e *Eligibility) localCapability(insp Inspector, self *corev1.Node) (announce.Capability, membership.NodeMeta) {
	meta := membership.NodeMeta{Ranking: announce.RankingVersion(), Ready: true}
	links, err := insp.Inspect()
	if err != nil {
		e.log.Warn("inspecting interfaces; serving nothing until it works", "err", err)
		meta.Reason = "cannot list interfaces: " + err.Error()
		return announce.Capability{}, meta
	}
	usable, defaults, unusable := usableLinks(links, e.nodeIPs(self))
	meta.Interfaces, meta.Defaults = usable, defaults
	meta.HW = macsOf(links, usable)
	switch {
	case len(usable) == 0:
		meta.Reason = "no usable interface"
	case len(defaults) == 0:
		meta.Reason = whyNoNodeIPs
	}
	if s := fmt.Sprint(unusable); s != e.unusable {
		e.unusable = s
		e.log.Info("interfaces", "usable", usable, "defaults", defaults, "left out", unusable)
	}
	e.met.usable.Set(float64(len(usable)))
	return announce.Capability{Interfaces: usable, Defaults: defaults}, meta
}

// nodeIPs are the node's InternalIP addresses, and the gossip bind address
// (status.hostIP) when it is one.
func (e *Eligibility) nodeIPs(self *corev1.Node) []netip.Addr {
	var out []netip.Addr
	if self != nil {
		out = convert.InternalIPs(self)
	}
	if ip, err := netip.ParseAddr(e.cfg.GossipBind); err == nil && !ip.IsUnspecified() {
		out = append(out, ip.Unmap())
	}
	return out
}

// report sets the metrics and, once per change, logs and queues a Node
// Event naming the policies this node cannot serve.
func (e *Eligibility) report(self *corev1.Node, caps announce.Capabilities, policies []announce.Policy, other []string) {
	local, ok := caps[e.cfg.Node]
	e.met.eligible.Set(b2f(ok && (local.Any || len(local.Interfaces) > 0)))
	e.reportRanking(other)
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
		e.cfg.Node, s, ifs, local.Defaults)
	e.log.Warn("this node cannot serve some policies that select it", "message", msg)
	if self != nil {
		e.events.Put(status.Event{Type: corev1.EventTypeWarning, Reason: EventReasonCannotAnnounce, Message: msg})
	}
}

// reportRanking sets the mixed-version gauge and logs a change.
func (e *Eligibility) reportRanking(other []string) {
	e.met.otherRanking.Set(float64(len(other)))
	if s := strings.Join(other, ","); s != e.otherRanking {
		e.otherRanking = s
		if s != "" {
			e.log.Warn("members rank with another hash version: owners may disagree until every agent runs one version",
				"ours", announce.RankingVersion(), "theirs", other)
		}
	}
}

// RunEvents records the queued Node Events off the decision loop, so an
// unreachable API server never delays a decision.
func (e *Eligibility) RunEvents(ctx context.Context, c client.Client, clk clock.Clock) error {
	if c == nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-e.events.Ready():
		}
		ev, _ := e.events.Get()
		now := metav1.NewTime(clk.Now())
		obj := &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: e.cfg.Node + ".", Namespace: metav1.NamespaceDefault},
			InvolvedObject: corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: e.cfg.Node},
			Reason:         ev.Reason, Message: ev.Message, Type: ev.Type,
			Source:         corev1.EventSource{Component: "mooring-agent", Host: e.cfg.Node},
			FirstTimestamp: now, LastTimestamp: now, Count: 1,
			ReportingController: "mooring.dev/agent", ReportingInstance: e.cfg.Node,
		}
		wctx, cancel := context.WithTimeout(ctx, status.APITimeout)
		err := c.Create(wctx, obj)
		cancel()
		if err != nil {
			e.log.Warn("recording a Node event failed", "reason", ev.Reason, "err", err)
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
