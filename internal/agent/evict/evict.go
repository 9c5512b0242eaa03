package evict

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/membership"
)

// Fast endpoint eviction (--fast-endpoint-eviction, issue 9 item 8). After
// a node dies its addresses move within a second, but clients keep failing
// until Kubernetes drops the dead node's endpoints: node-lifecycle marks
// its pods NotReady only after the node-monitor grace period (50 s by
// default). The agents already know sooner, and with two signals: gossip
// lost the member AND its kernel answers no ARP/NDP (a stalled or
// restarting agent's kernel answers; so does a node cut off from gossip
// only). When both say dead, one agent marks the node's pods NotReady
// itself (Ready and ContainersReady False, reason PodReasonNodeUnreachable,
// through pods/status, as node-lifecycle's MarkPodsNotReady does), and the
// EndpointSlice controller drops their endpoints at once.
//
// Guards:
//   - only nodes this agent has seen as gossip members, and only once it has
//     checked their kernel itself (not on gossip alone);
//   - a side that defers on a partition (internal/agent/gossip) writes and cleans
//     nothing;
//   - one writer: the smallest name among the live members (every agent of
//     the majority computes the same; a brief overlap only repeats an
//     idempotent patch);
//   - at most FastEvictionMaxShare of the Nodes (at least one) evicted at
//     once; a node held back gets an Event;
//   - the decider lists the node in its own L2Announcer's status.lost
//     before it marks a pod there, and unlists it when the node is back or
//     gone (lost.go): the admission policy mooring-agent-eviction allows an
//     agent to mark only pods of the nodes its own status.lost lists, never
//     its own node's, so a compromised node cannot mark a live node's pods
//     without declaring it lost where everyone sees it;
//   - every eviction is an Event on the Node, naming the agent, and counted;
//   - the kubelet owns the Ready condition and writes it back True at its
//     next pod sync if the node was alive after all (the lab's kubelet
//     stand-in does the same, internal/lab/kubelet).
//
// Every agent of the majority also deletes, in its own node's conntrack
// table, the unanswered entries that translate a LoadBalancer address to
// an endpoint on the dead node (internal/conntrack), a few times over the
// seconds kube-proxy needs to stop choosing those endpoints.
//
// The agent's ServiceAccount gains pods list and pods/status patch; the
// ValidatingAdmissionPolicy config/agent/admissionpolicy-pods.yaml limits
// those writes to this one change, and admissionpolicy-eviction.yaml to
// pods of the nodes listed in the agent's own status.lost.
//
// +kubebuilder:rbac:roleName=mooring-agent-eviction,groups="",resources=pods,verbs=list
// +kubebuilder:rbac:roleName=mooring-agent-eviction,groups="",resources=pods/status,verbs=patch

// PodReasonNodeUnreachable is the reason of the pod conditions the agent
// sets False.
const PodReasonNodeUnreachable = "MooringNodeUnreachable"

// Event reasons on the Node.
const (
	eventReasonPodsNotReady    = "MooringPodsMarkedNotReady"
	eventReasonEvictionLimited = "MooringEvictionLimited"
)

const (
	// evictTick paces the look at the member set: membership changes are
	// in memory, so the cost is a few sorted slices per tick.
	evictTick = 100 * time.Millisecond
	// evictRecheck is how often a lost member whose node still answers is
	// checked again, and how soon a failed eviction is retried.
	evictRecheck = time.Second
)

// conntrackRounds are when, after a node is confirmed dead, its entries
// are deleted: at once, and again while kube-proxy may still pick its
// endpoints for new connections.
var conntrackRounds = []time.Duration{0, 500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second}

// View is the evictor's view of gossip: the live members (after the
// partition rule), the unreachable ones and whether this side defers. The
// agent's fail-safe membership (internal/agent/gossip) is one; without the
// partition state a minority could evict, so there is no fallback.
type View interface {
	Members() []string
	Unreachable() []string
	Deferring() bool
}

// NodeCheck asks whether the node at addr answers ARP/NDP.
type NodeCheck = membership.NodeCheck

// Config is what the evictor is told.
type Config struct {
	// Node is this agent's node.
	Node string
	// MaxShare bounds the share of Nodes treated at a time (at least one).
	MaxShare float64
}

// Deps are what it reads and writes through.
type Deps struct {
	View      View
	Reader    client.Reader                      // the caches: Nodes, Services
	Client    client.Client                      // pods (list, status patch), pod IPAM blocks
	NodeCheck NodeCheck                          // nil: no node is ever confirmed dead
	Conntrack func(conntrack.Match) (int, error) // nil: cleans nothing
	Recorder  *status.Recorder
	Clock     clock.WithTicker
	Log       *slog.Logger
}

// lostNode is a member gossip lost, as the evictor tracks it.
type lostNode struct {
	checked time.Time // last kernel check
	dead    time.Time // confirmed dead; zero while not
	evicted bool
	// listed: this agent marks (or marked) its pods, so its own
	// L2Announcer must list it in status.lost (lost.go).
	listed  bool
	retryAt time.Time // after a failed eviction
	denied  int       // evictions denied in a row (policy not yet current)
	limited bool      // the share limit held it back (Event recorded)
	cleans  int       // conntrack rounds done
	// endpoints are the dead node's pod and IPAM-block addresses, read
	// from the API once (endpointsRead) for the conntrack clean-up.
	endpoints     []netip.Prefix
	endpointsRead bool
}

// Evictor runs fast endpoint eviction.
type Evictor struct {
	cfg  Config
	deps Deps
	met  *metrics
	seen map[string]bool      // nodes seen as members (or unreachable)
	lost map[string]*lostNode // seen, now gone
	// published is status.lost as last written or read; nil: unknown
	// (read once before the first write).
	published  *[]string
	lostFailed time.Time // the last failed write of status.lost
}

// New builds an evictor; its metrics go to reg (nil: unregistered).
func New(cfg Config, deps Deps, reg prometheus.Registerer) *Evictor {
	return &Evictor{cfg: cfg, deps: deps, met: newMetrics(reg), seen: map[string]bool{}, lost: map[string]*lostNode{}}
}

// Run evicts until ctx ends.
func (e *Evictor) Run(ctx context.Context) error {
	tick := e.deps.Clock.NewTicker(evictTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C():
		}
		e.round(ctx)
	}
}

func (e *Evictor) round(ctx context.Context) {
	live := e.deps.View.Members()
	present := map[string]bool{}
	for _, n := range live {
		present[n] = true
	}
	for _, n := range e.deps.View.Unreachable() {
		present[n] = true
	}
	for n := range present {
		e.seen[n] = true
		if l := e.lost[n]; l != nil {
			delete(e.lost, n)
			if l.evicted {
				e.deps.Log.Info("a node whose pods were marked NotReady is back in gossip; its kubelet marks them Ready", "node", n)
			}
		}
	}
	e.met.dead.Set(float64(e.deadCount()))
	if e.deps.View.Deferring() {
		e.syncLostLogged(ctx) // a node back is unlisted even here
		return                // a minority decides nothing
	}
	for n := range e.seen {
		if !present[n] && n != e.cfg.Node && e.lost[n] == nil {
			e.lost[n] = &lostNode{}
		}
	}
	now := e.deps.Clock.Now()
	for _, name := range slices.Sorted(maps.Keys(e.lost)) {
		l := e.lost[name]
		if l.dead.IsZero() {
			if !l.checked.IsZero() && now.Sub(l.checked) < evictRecheck {
				continue
			}
			l.checked = now
			if !e.confirm(ctx, name) {
				continue
			}
			l.dead = e.deps.Clock.Now()
		}
		e.clean(ctx, name, l)
	}
	if len(live) > 0 && slices.Min(live) == e.cfg.Node {
		e.evictDue(ctx)
	}
	e.syncLostLogged(ctx)
	e.met.dead.Set(float64(e.deadCount()))
}

func (e *Evictor) deadCount() int {
	n := 0
	for _, l := range e.lost {
		if !l.dead.IsZero() {
			n++
		}
	}
	return n
}

// confirm checks a lost member's node addresses itself: dead only if at
// least one check got no answer and none answered or failed to be asked.
// A Node that no longer exists is forgotten.
func (e *Evictor) confirm(ctx context.Context, name string) bool {
	var node corev1.Node
	if err := e.deps.Reader.Get(ctx, types.NamespacedName{Name: name}, &node); apierrors.IsNotFound(err) {
		delete(e.seen, name)
		delete(e.lost, name)
		return false
	} else if err != nil {
		e.deps.Log.Warn("fast eviction: reading the Node of a lost member", "node", name, "err", err)
		return false
	}
	addrs := convert.InternalIPs(&node)
	if len(addrs) == 0 || e.deps.NodeCheck == nil {
		return false
	}
	type result struct {
		alive bool
		err   error
	}
	res := make([]result, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			res[i].alive, res[i].err = e.deps.NodeCheck(ctx, addr)
		})
	}
	wg.Wait()
	for i, r := range res {
		if r.alive || r.err != nil {
			if r.err != nil {
				e.deps.Log.Warn("fast eviction: cannot check a lost member's node; not evicting", "node", name, "addr", addrs[i], "err", r.err)
			}
			return false
		}
	}
	e.deps.Log.Warn("node confirmed dead: gossip lost it and its kernel answers no ARP/NDP", "node", name, "addrs", addrs)
	return true
}

// evictDue marks the pods of confirmed-dead nodes NotReady, within the
// share limit. Only the deciding agent calls it.
func (e *Evictor) evictDue(ctx context.Context) {
	var nodes corev1.NodeList
	if err := e.deps.Reader.List(ctx, &nodes, client.UnsafeDisableDeepCopy); err != nil {
		e.deps.Log.Warn("fast eviction: listing Nodes", "err", err)
		return
	}
	limit := evictionLimit(len(nodes.Items), e.cfg.MaxShare)
	evicted := 0
	for name, l := range e.lost {
		if nodeNamed(nodes.Items, name) == nil { // deleted: no longer counts against the limit
			delete(e.lost, name)
			delete(e.seen, name)
			continue
		}
		if l.evicted {
			evicted++
		}
	}
	now := e.deps.Clock.Now()
	for _, name := range slices.Sorted(maps.Keys(e.lost)) {
		l := e.lost[name]
		if l.dead.IsZero() || l.evicted || now.Before(l.retryAt) {
			continue
		}
		node := nodeNamed(nodes.Items, name)
		if evicted >= limit {
			if !l.limited {
				l.limited = true
				e.met.nodes.WithLabelValues("limited").Inc()
				e.deps.Recorder.RecordOn(ctx, nodeRef(node), status.Event{Type: corev1.EventTypeWarning, Reason: eventReasonEvictionLimited, Message: fmt.Sprintf(
					"node %s is confirmed dead, but %d of %d nodes already have their pods marked NotReady by Mooring (--fast-eviction-max-share %.2f): "+
						"its endpoints stay until Kubernetes' node-monitor grace period", name, evicted, len(nodes.Items), e.cfg.MaxShare)},
					metav1.NamespaceDefault)
			}
			continue
		}
		l.listed = true // first listed in status.lost: the policy allows only that
		n, err := 0, e.syncLost(ctx)
		if err == nil {
			n, err = e.markNotReady(ctx, node)
		}
		if err != nil {
			l.retryAt = now.Add(e.retryDelay(l, err))
			e.met.nodes.WithLabelValues("failed").Inc()
			e.deps.Log.Warn("fast eviction: marking pods NotReady; retrying", "node", name, "marked", n, "err", err)
			continue
		}
		l.evicted = true
		evicted++
		e.met.nodes.WithLabelValues("evicted").Inc()
		e.deps.Log.Warn("pods of a dead node marked NotReady", "node", name, "pods", n, "after", e.deps.Clock.Since(l.dead).Round(time.Millisecond))
		e.deps.Recorder.RecordOn(ctx, nodeRef(node), status.Event{Type: corev1.EventTypeWarning, Reason: eventReasonPodsNotReady, Message: fmt.Sprintf(
			"gossip lost node %s and its kernel answers no ARP/NDP at %s: the agent of node %s listed it in its L2Announcer's status.lost "+
				"and marked %d pod(s) NotReady (reason %s) so that their endpoints leave Services now instead of after the node-monitor "+
				"grace period; the kubelet marks them Ready again if the node is alive",
			name, joinAddrs(convert.InternalIPs(node)), e.cfg.Node, n, PodReasonNodeUnreachable)}, metav1.NamespaceDefault)
	}
}

// maxDeniedFast is how many denied evictions in a row are retried at the
// next tick: the API server's admission policy reads status.lost from its
// own watch cache, a few milliseconds behind the write that listed the
// node. After that, denials are retried as other failures.
const maxDeniedFast = 20

func (e *Evictor) retryDelay(l *lostNode, err error) time.Duration {
	if apierrors.IsForbidden(err) && l.denied < maxDeniedFast {
		l.denied++
		return 0
	}
	return evictRecheck
}

// syncLostLogged is syncLost outside an eviction: it clears nodes that
// are back or gone; a failure is retried at a later round.
func (e *Evictor) syncLostLogged(ctx context.Context) {
	if err := e.syncLost(ctx); err != nil && !errors.Is(err, errLostWait) {
		e.deps.Log.Warn("fast eviction: updating this node's L2Announcer status.lost; retrying", "err", err)
	}
}

// evictionLimit is how many nodes may have their pods marked NotReady at
// once: share of the cluster's nodes, rounded down, but at least one.
func evictionLimit(nodes int, share float64) int {
	return max(1, int(share*float64(nodes)))
}

func nodeNamed(nodes []corev1.Node, name string) *corev1.Node {
	for i := range nodes {
		if nodes[i].Name == name {
			return &nodes[i]
		}
	}
	return nil
}

func nodeRef(n *corev1.Node) *corev1.ObjectReference {
	return &corev1.ObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID}
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// markNotReady patches every running, Ready pod on node to NotReady and
// returns how many it patched. Pods are read from the API (the agent keeps
// no pod cache: only the deciding agent, only after a death, needs them).
func (e *Evictor) markNotReady(ctx context.Context, node *corev1.Node) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var pods corev1.PodList
	if err := e.deps.Client.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node.Name}); err != nil {
		return 0, fmt.Errorf("listing the pods of node %s: %w", node.Name, err)
	}
	patch, err := notReadyPatch(node.Name, metav1.NewTime(e.deps.Clock.Now()))
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || !kube.PodReady(p) {
			continue
		}
		err := e.deps.Client.Status().Patch(ctx, p, client.RawPatch(types.StrategicMergePatchType, patch))
		e.deps.Recorder.Writes.Count("pod_status", err)
		switch {
		case err == nil:
			n++
			e.met.pods.Inc()
		case apierrors.IsNotFound(err):
		default:
			errs = append(errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
		}
	}
	return n, errors.Join(errs...)
}

// notReadyPatch is the strategic-merge patch of a pod's status that sets
// Ready and ContainersReady False (conditions merge by type: the others
// are kept).
func notReadyPatch(node string, now metav1.Time) ([]byte, error) {
	msg := fmt.Sprintf("Mooring: node %s is confirmed dead (gossip lost it and it answers no ARP/NDP)", node)
	conds := []corev1.PodCondition{}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		conds = append(conds, corev1.PodCondition{Type: t, Status: corev1.ConditionFalse,
			Reason: PodReasonNodeUnreachable, Message: msg, LastTransitionTime: now})
	}
	return json.Marshal(map[string]any{"status": map[string]any{"conditions": conds}})
}

// clean runs the conntrack rounds that are due for a dead node.
func (e *Evictor) clean(ctx context.Context, name string, l *lostNode) {
	if e.deps.Conntrack == nil || l.cleans >= len(conntrackRounds) || e.deps.Clock.Since(l.dead) < conntrackRounds[l.cleans] {
		return
	}
	l.cleans++
	m, err := e.conntrackMatch(ctx, name, l)
	if err != nil {
		e.deps.Log.Warn("conntrack clean-up: reading the dead node and the Services", "node", name, "err", err)
		return
	}
	n, err := e.deps.Conntrack(m)
	e.met.conntrack.Add(float64(n))
	if err != nil {
		e.deps.Log.Warn("conntrack clean-up", "node", name, "deleted", n, "err", err)
	} else if n > 0 {
		e.deps.Log.Info("deleted conntrack entries to a dead node's endpoints", "node", name, "entries", n, "round", l.cleans)
	}
}

// conntrackMatch selects the entries from LoadBalancer addresses to the
// dead node's endpoints: the addresses of its pods (pods of any IPAM block,
// hostNetwork pods with the node's addresses), its pod IPAM blocks when
// this agent may read them, its spec.podCIDRs and its InternalIPs. The
// Node and the Services come from the caches; pods and blocks are read
// from the API once per death (a field-selected list of one node's pods),
// and until that succeeds (API server away) the ranges and node addresses
// alone are matched.
func (e *Evictor) conntrackMatch(ctx context.Context, name string, l *lostNode) (conntrack.Match, error) {
	m := conntrack.Match{Unreplied: true} // safe on a false alarm (internal/conntrack)
	var node corev1.Node
	if err := e.deps.Reader.Get(ctx, types.NamespacedName{Name: name}, &node); err != nil {
		return m, err
	}
	for _, c := range node.Spec.PodCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			m.Via = append(m.Via, p.Masked())
		}
	}
	for _, ip := range convert.InternalIPs(&node) {
		m.Via = append(m.Via, netip.PrefixFrom(ip, ip.BitLen()))
	}
	if !l.endpointsRead {
		eps, err := e.endpointsOf(ctx, name)
		if err != nil {
			e.deps.Log.Warn("conntrack clean-up: reading the dead node's pods; matching its ranges and addresses only for now", "node", name, "err", err)
		} else {
			l.endpoints, l.endpointsRead = eps, true
		}
	}
	m.Via = append(m.Via, l.endpoints...)
	var svcs corev1.ServiceList
	if err := e.deps.Reader.List(ctx, &svcs, client.UnsafeDisableDeepCopy); err != nil {
		return m, err
	}
	for _, s := range svcs.Items {
		for _, in := range s.Status.LoadBalancer.Ingress {
			if ip, err := netip.ParseAddr(in.IP); err == nil {
				m.To = append(m.To, ip.Unmap())
			}
		}
	}
	if len(m.To) == 0 {
		return conntrack.Match{}, nil // no LoadBalancer address: nothing of ours to clean
	}
	return m, nil
}

// endpointsOf reads the addresses a dead node's endpoints can have: its
// pods' IPs (what the EndpointSlices list for it: the EndpointSlice
// controller takes endpoint addresses from pods) and its PodIPAMNode's
// blocks when pod IPAM is on and this agent may read them.
func (e *Evictor) endpointsOf(ctx context.Context, name string) ([]netip.Prefix, error) {
	ctx, cancel := context.WithTimeout(ctx, status.APITimeout)
	defer cancel()
	var pods corev1.PodList
	if err := e.deps.Client.List(ctx, &pods, client.MatchingFields{"spec.nodeName": name}); err != nil {
		return nil, err
	}
	var out []netip.Prefix
	for _, p := range pods.Items {
		for _, ip := range p.Status.PodIPs {
			if addr, err := netip.ParseAddr(ip.IP); err == nil {
				addr = addr.Unmap()
				out = append(out, netip.PrefixFrom(addr, addr.BitLen()))
			}
		}
	}
	var blocks mooringv1.PodIPAMNode
	switch err := e.deps.Client.Get(ctx, types.NamespacedName{Name: name}, &blocks); {
	case err == nil:
		for _, b := range blocks.Status.Blocks {
			if p, err := netip.ParsePrefix(b.CIDR); err == nil {
				out = append(out, p.Masked())
			}
		}
	case apierrors.IsNotFound(err), apierrors.IsForbidden(err), meta.IsNoMatchError(err):
		// No pod IPAM here, or not ours to read: pods and ranges suffice.
	default:
		e.deps.Log.Debug("conntrack clean-up: reading the dead node's pod IPAM blocks", "node", name, "err", err)
	}
	return out, nil
}
