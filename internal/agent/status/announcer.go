package status

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// Decision is what the status writer gets from the decision loop.
type Decision struct {
	Res     announce.Result
	Members []string
	// Capability is this node's, nil when it publishes none.
	Capability *announce.Capability
	// Prefixes are the networks of the node's interfaces, by index.
	Prefixes map[int][]string
	// Applied is the configuration the decision used (never modified
	// after it is handed over); nil before the policies were read.
	Applied *mooringv1.AppliedConfig
	// Unanswered are the interfaces, by index, the responder cannot
	// answer on, with why (responder.Manager.Unanswered); nil: none.
	Unanswered map[int]string
}

// AppliedConfig records the policies' generations a decision uses.
func AppliedConfig(pols []mooringv1.L2AnnouncementPolicy) *mooringv1.AppliedConfig {
	out := &mooringv1.AppliedConfig{}
	for _, p := range pols {
		out.Policies = append(out.Policies, mooringv1.AppliedGeneration{Name: p.Name, Generation: p.Generation})
	}
	slices.SortFunc(out.Policies, func(a, b mooringv1.AppliedGeneration) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// announcerStatus is this node's L2Announcer status for a decision: its
// gossip view and interfaces (the inputs, besides API objects, that name
// every address's announcer) and the problems this node reports — its own
// (an owned address no interface matches) and, on the status writer only,
// the addresses no live node may announce. Nothing in it changes when a
// Service is added and announced normally.
func announcerStatus(d Decision, local string) mooringv1.L2AnnouncerStatus {
	st := mooringv1.L2AnnouncerStatus{StatusWriter: d.Res.StatusWriter == local, Applied: d.Applied}
	st.Members = slices.Sorted(slices.Values(d.Members))
	st.Members = slices.Compact(st.Members)
	if c := d.Capability; c != nil {
		st.Capability = &mooringv1.AnnouncerCapability{Any: c.Any, Interfaces: c.Interfaces, Defaults: c.Defaults}
	}
	for _, ifi := range d.Res.Listen {
		st.Interfaces = append(st.Interfaces, mooringv1.AnnouncerInterface{Name: ifi.Name, Index: int32(ifi.Index),
			Prefixes: slices.Clone(d.Prefixes[ifi.Index])})
	}
	for _, p := range d.Res.Problems {
		if p.Policy != "" || !p.Addr.IsValid() {
			continue // policy problems go to the policy's status
		}
		o := ownerOf(d.Res, p.Addr)
		reason := mooringv1.ProblemNoMatchingInterface
		if o.Node == "" {
			if !st.StatusWriter {
				continue
			}
			reason = mooringv1.ProblemNoEligibleNode
		} else if o.Node != local {
			continue
		}
		st.ProblemCount++
		if len(st.Problems) < mooringv1.MaxAnnouncerProblems {
			st.Problems = append(st.Problems, mooringv1.AnnouncementProblem{Address: p.Addr.String(),
				Services: keyStrings(o.Services), Reason: reason, Message: p.Message})
		}
	}
	return withUnanswered(st, d, local)
}

// withUnanswered adds a ResponderFailed problem for every address this
// node answers for on an interface its responder cannot open, and keeps
// the problems sorted by address.
func withUnanswered(st mooringv1.L2AnnouncerStatus, d Decision, local string) mooringv1.L2AnnouncerStatus {
	if len(d.Unanswered) == 0 {
		return st
	}
	var addrs []netip.Addr
	why := map[netip.Addr][]string{}
	for _, e := range d.Res.Local {
		msg, ok := d.Unanswered[e.IfIndex]
		if !ok {
			continue
		}
		if why[e.Addr] == nil {
			addrs = append(addrs, e.Addr)
		}
		why[e.Addr] = append(why[e.Addr], fmt.Sprintf("on %s: %s", e.IfName, msg))
	}
	if len(addrs) == 0 {
		return st
	}
	listed := map[netip.Addr]bool{}
	for _, p := range st.Problems {
		if a, err := netip.ParseAddr(p.Address); err == nil {
			listed[a] = true
		}
	}
	for _, a := range addrs {
		st.ProblemCount++
		if listed[a] || len(st.Problems) >= mooringv1.MaxAnnouncerProblems {
			continue
		}
		st.Problems = append(st.Problems, mooringv1.AnnouncementProblem{Address: a.String(),
			Services: keyStrings(ownerOf(d.Res, a).Services), Reason: mooringv1.ProblemResponderFailed,
			Message: fmt.Sprintf("%s owns %s but its agent cannot answer ARP/NDP for it (%s); it retries while it runs: see its log, its /readyz and `mooring doctor`",
				local, a, strings.Join(why[a], "; "))})
	}
	slices.SortStableFunc(st.Problems, func(x, y mooringv1.AnnouncementProblem) int {
		return netip.MustParseAddr(x.Address).Compare(netip.MustParseAddr(y.Address))
	})
	return st
}

func ownerOf(res announce.Result, a netip.Addr) announce.Owner {
	i, ok := slices.BinarySearchFunc(res.Owners, a, func(o announce.Owner, a netip.Addr) int { return o.Addr.Compare(a) })
	if !ok {
		return announce.Owner{Addr: a}
	}
	return res.Owners[i]
}

func keyStrings(ks []announce.ServiceKey) []string {
	out := make([]string, len(ks))
	for i, k := range ks {
		out[i] = k.String()
	}
	return out
}

// ServiceEvent is an Event to record on a Service.
type ServiceEvent struct {
	svc announce.ServiceKey
	ev  Event
}

// maxQueuedEvents bounds the Events waiting for the writer: a policy
// change that unannounces thousands of addresses must not queue thousands
// of API calls; the L2Announcer's problems say the rest.
const maxQueuedEvents = 256

// EventQueue passes Events from the decision loop to the status writer.
type EventQueue struct {
	mu      sync.Mutex
	items   []ServiceEvent
	dropped int
}

// Add queues evs, dropping what exceeds maxQueuedEvents.
func (q *EventQueue) Add(evs ...ServiceEvent) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, e := range evs {
		if len(q.items) >= maxQueuedEvents {
			q.dropped++
			continue
		}
		q.items = append(q.items, e)
	}
}

func (q *EventQueue) take() ([]ServiceEvent, int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	items, dropped := q.items, q.dropped
	q.items, q.dropped = nil, 0
	return items, dropped
}

// ChangeEvents are the Events a decision's changes call for, from this
// node: a move to this node (never a first announcement: that costs the
// cluster no write), and, on the status writer, an address nobody may
// announce (any more, or from the start).
func ChangeEvents(changes []announce.Change, res announce.Result, local string) []ServiceEvent {
	var out []ServiceEvent
	for _, c := range changes {
		o := ownerOf(res, c.Addr)
		var ev Event
		switch {
		case c.From == "" && c.To != "", c.From == c.To && c.To != "":
			continue // a first announcement, or only interfaces changed
		case c.From == "" && res.StatusWriter == local && len(o.Services) > 0:
			ev = Event{Type: corev1.EventTypeWarning, Reason: mooringv1.EventReasonUnannounced,
				Message: fmt.Sprintf("no live node may announce %s (check the L2AnnouncementPolicies' nodeSelector and, for externalTrafficPolicy: Local, the ready endpoints)", c.Addr)}
		case c.To == local:
			var ifs []string
			for _, e := range res.Local {
				if e.Addr == c.Addr {
					ifs = append(ifs, e.IfName)
				}
			}
			ev = Event{Type: corev1.EventTypeNormal, Reason: mooringv1.EventReasonAnnounced,
				Message: fmt.Sprintf("%s is now announced by %s on %s (was %s)", c.Addr, local, strings.Join(ifs, ", "), c.From)}
		case c.To == "" && res.StatusWriter == local && len(o.Services) > 0:
			ev = Event{Type: corev1.EventTypeWarning, Reason: mooringv1.EventReasonUnannounced,
				Message: fmt.Sprintf("%s was announced by %s; no live node may announce it now (check the L2AnnouncementPolicies' nodeSelector and, for externalTrafficPolicy: Local, the ready endpoints)", c.Addr, c.From)}
		default:
			continue
		}
		for _, k := range o.Services {
			out = append(out, ServiceEvent{svc: k, ev: ev})
		}
	}
	return out
}
