package status

import (
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/bgpagent"
)

// Row is one LoadBalancer Service as `mooring status` shows it; -o json
// and -o yaml print these fields.
type Row struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	// Class is spec.loadBalancerClass; empty when unset.
	Class string `json:"class,omitempty"`
	// OtherClass is set when the class is neither empty nor Mooring's:
	// another implementation serves the Service.
	OtherClass bool     `json:"otherClass,omitempty"`
	Addresses  []string `json:"addresses"`
	// Assigned is the controller's AddressAssigned condition.
	Assigned *Condition `json:"assigned,omitempty"`
	// AnnouncedBy has one entry per announced address, recomputed from the
	// API objects and the agents' L2Announcers (agentstatus.Announcements).
	AnnouncedBy []Announcement `json:"announcedBy,omitempty"`
	// AdvertisedBy has one entry per address advertised over BGP on an
	// Established session (bgpagent.ReadAdvertised).
	AdvertisedBy []Advertisement `json:"advertisedBy,omitempty"`
	// Messages are what needs the operator's attention now: conditions that
	// are not as they should be.
	Messages []string `json:"messages,omitempty"`
	// Problems are the current problems the agents' L2Announcers list for
	// the Service's addresses (NoEligibleNode, NoMatchingInterface), a
	// reason for every other address nobody announces, and recent Warning
	// Events the agents recorded (split brain, stale local copies).
	Problems []Problem `json:"problems,omitempty"`
}

// Condition is a Mooring condition of the Service.
type Condition struct {
	Status  string `json:"status"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// Announcement says who answers ARP/NDP for one address.
type Announcement struct {
	Address string `json:"address"`
	// By is "node/interface[+interface]" ("node" when no interface is known).
	By         string   `json:"by"`
	Node       string   `json:"node,omitempty"`
	Interfaces []string `json:"interfaces,omitempty"`
	// Implementation is another implementation that announces the address
	// now ("MetalLB", "Cilium"); empty for Mooring.
	Implementation string `json:"implementation,omitempty"`
	// Source is where another implementation's announcer was read, e.g.
	// "ServiceL2Status metallb-system/l2-abcde".
	Source string `json:"source,omitempty"`
}

// Problem is one Warning Event an agent recorded on the Service, or a
// current problem (Current: from an L2Announcer or the recomputed
// announcements, LastSeen is when status looked).
type Problem struct {
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	Node     string    `json:"node,omitempty"`
	Count    int32     `json:"count"`
	LastSeen time.Time `json:"lastSeen"`
	Current  bool      `json:"current,omitempty"`
}

// fromAgent says whether an Event was recorded by Mooring's agent
// (internal/agent's recorder names itself both ways).
func fromAgent(e *corev1.Event) bool {
	return e.Source.Component == "mooring-agent" || e.ReportingController == "mooring.dev/agent"
}

// lastSeen is when an Event was last observed, whichever API wrote it.
func lastSeen(e *corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case e.Series != nil && !e.Series.LastObservedTime.IsZero():
		return e.Series.LastObservedTime.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

// Announced is what the API says about announcing: who announces every
// address (agentstatus.Announcements) and every node's L2Announcer. The zero
// value means it was not read: ANNOUNCED BY stays empty, and only Events
// are problems.
type Announced struct {
	Known         bool
	Announcements []agentstatus.Announcement
	Announcers    []mooringv1.L2Announcer
	// Others is who else serves LoadBalancer Services and how Mooring's
	// controller runs; its zero value: not read.
	Others Others
	// BGP is what the agents advertise over BGP; its zero value: not read,
	// or no BGP objects.
	BGP bgpagent.Advertised
}

// Rows turns LoadBalancer Services and the Events of their namespaces
// into sorted rows; other Services are skipped. The current problems of
// the rows' addresses (from an, dated now) come first, then the Warning
// Events of the agents newer than since, except an L2Unannounced that a
// later L2Announced has answered.
func Rows(svcs []corev1.Service, events []corev1.Event, an Announced, since, now time.Time) []Row {
	byService := problemsByService(events, since)
	var rows []Row
	for i := range svcs {
		s := &svcs[i]
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		r := row(s)
		key := s.Namespace + "/" + s.Name
		served := an.Others.serving(key)
		if an.BGP.Known && !r.OtherClass {
			var probs []Problem
			r.AdvertisedBy, probs = advertised(an.BGP, r.Addresses, now)
			r.Problems = append(r.Problems, probs...)
		}
		if an.Known && !r.OtherClass {
			var probs []Problem
			r.AnnouncedBy, probs = an.forAddresses(r.Addresses, now)
			r.Problems = append(probs, r.Problems...)
			r.Problems = withoutServed(r.Problems, served)
		}
		r.AnnouncedBy = append(r.AnnouncedBy, foreignAnnouncements(r.Addresses, served)...)
		if !r.OtherClass && r.Assigned == nil {
			r.Messages = append(r.Messages, an.Others.unassigned(s, served))
		}
		r.Problems = append(r.Problems, byService[key]...)
		rows = append(rows, r)
	}
	sort.Slice(rows, func(i, j int) bool {
		if rows[i].Namespace != rows[j].Namespace {
			return rows[i].Namespace < rows[j].Namespace
		}
		return rows[i].Name < rows[j].Name
	})
	return rows
}

// Reasons of the current problems status derives itself, besides the
// L2Announcers' own (mooringv1.ProblemNoEligibleNode, ...).
const (
	// ReasonNotAnnounced: no agent's decision covers the address.
	ReasonNotAnnounced = "NotAnnounced"
	// ReasonAgentsDisagree: several live agents each consider themselves
	// the owner (their gossip views differ).
	ReasonAgentsDisagree = "AgentsDisagree"
)

// forAddresses is who announces each of addrs, in their order, and the
// current problems: every L2Announcer's for these addresses, else the
// reason internal/agent/status.Announcements gives, so that every address nobody
// announces has one.
func (an Announced) forAddresses(addrs []string, now time.Time) ([]Announcement, []Problem) {
	byAddr := map[netip.Addr]*agentstatus.Announcement{}
	for i := range an.Announcements {
		byAddr[an.Announcements[i].Addr.Unmap()] = &an.Announcements[i]
	}
	listed := map[netip.Addr][]Problem{}
	for _, l := range an.Announcers {
		for _, p := range l.Status.Problems {
			if a, err := netip.ParseAddr(p.Address); err == nil {
				listed[a.Unmap()] = append(listed[a.Unmap()], Problem{Reason: p.Reason, Message: withAddr(a.Unmap(), p.Message),
					Node: l.Name, Count: 1, LastSeen: now, Current: true})
			}
		}
	}
	var anns []Announcement
	var probs []Problem
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		a = a.Unmap()
		x := byAddr[a]
		if x != nil && x.Node != "" && !responderFailed(listed[a], x.Node) {
			by := x.Node
			if len(x.Interfaces) > 0 {
				by += "/" + strings.Join(x.Interfaces, "+")
			}
			anns = append(anns, Announcement{Address: a.String(), By: by, Node: x.Node, Interfaces: x.Interfaces})
		}
		if ps := listed[a]; len(ps) > 0 {
			probs = append(probs, ps...)
			continue
		}
		p := Problem{Count: 1, LastSeen: now, Current: true}
		switch {
		case x == nil && bgpServes(an.BGP, a):
			continue // advertised over BGP, not announced over L2: as configured
		case x == nil && len(an.Announcers) == 0:
			p.Reason, p.Message = ReasonNotAnnounced, "no node has an L2Announcer: is `mooring agent` running?"
		case x == nil:
			p.Reason, p.Message = ReasonNotAnnounced, "no L2AnnouncementPolicy covers it, or the agents do not serve this Service"
		case x.Reason == "":
			continue
		case x.Node == "":
			p.Reason, p.Message = mooringv1.ProblemNoEligibleNode, x.Reason
		case len(x.Claimants) > 1:
			p.Reason, p.Message = ReasonAgentsDisagree, x.Reason
		default:
			p.Reason, p.Message = mooringv1.ProblemNoMatchingInterface, x.Reason
		}
		p.Message = withAddr(a, p.Message)
		probs = append(probs, p)
	}
	return anns, probs
}

// responderFailed reports whether node itself lists the address as
// ResponderFailed: the decision names it, but its agent cannot answer
// ARP/NDP, so nobody announces the address.
func responderFailed(ps []Problem, node string) bool {
	return slices.ContainsFunc(ps, func(p Problem) bool { return p.Reason == mooringv1.ProblemResponderFailed && p.Node == node })
}

// withAddr prefixes msg with the address unless it names it already.
func withAddr(a netip.Addr, msg string) string {
	if strings.Contains(msg, a.String()) {
		return msg
	}
	return a.String() + ": " + msg
}

func row(s *corev1.Service) Row {
	r := Row{Namespace: s.Namespace, Name: s.Name, Addresses: []string{}}
	if c := s.Spec.LoadBalancerClass; c != nil {
		r.Class = *c
		r.OtherClass = *c != mooringv1.LoadBalancerClass
	}
	for _, in := range s.Status.LoadBalancer.Ingress {
		if in.IP != "" {
			r.Addresses = append(r.Addresses, in.IP)
		}
	}
	if r.OtherClass {
		r.Messages = []string{"not Mooring's: loadBalancerClass " + r.Class}
		return r
	}
	for _, c := range s.Status.Conditions {
		switch c.Type {
		case mooringv1.ConditionAddressAssigned:
			r.Assigned = &Condition{Status: string(c.Status), Reason: c.Reason, Message: c.Message}
			if c.Status != metav1.ConditionTrue && c.Message != "" {
				r.Messages = append(r.Messages, c.Message)
			}
		case mooringv1.ConditionAnnounced:
			if c.Status == metav1.ConditionFalse && c.Message != "" {
				r.Messages = append(r.Messages, c.Message)
			}
		case mooringv1.ConditionAddressOutsidePools, mooringv1.ConditionAddressDuplicated:
			if c.Status == metav1.ConditionTrue && c.Message != "" {
				r.Messages = append(r.Messages, c.Message)
			}
		}
	}
	return r
}

// problemsByService groups the agents' recent Warning Events by Service,
// newest first, one per (reason, node).
func problemsByService(events []corev1.Event, since time.Time) map[string][]Problem {
	announced := map[string]time.Time{} // latest L2Announced per Service
	for i := range events {
		e := &events[i]
		if fromAgent(e) && e.Reason == mooringv1.EventReasonAnnounced {
			k := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
			if t := lastSeen(e); t.After(announced[k]) {
				announced[k] = t
			}
		}
	}
	type key struct{ svc, reason, node string }
	latest := map[key]Problem{}
	for i := range events {
		e := &events[i]
		if e.Type != corev1.EventTypeWarning || e.InvolvedObject.Kind != "Service" || !fromAgent(e) {
			continue
		}
		svc := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
		t := lastSeen(e)
		if t.Before(since) || (e.Reason == mooringv1.EventReasonUnannounced && !t.After(announced[svc])) {
			continue
		}
		node := e.Source.Host
		if node == "" {
			node = e.ReportingInstance
		}
		k := key{svc, e.Reason, node}
		p, ok := latest[k]
		count := max(e.Count, 1)
		if ok {
			count += p.Count
		}
		if !ok || t.After(p.LastSeen) {
			p = Problem{Reason: e.Reason, Message: e.Message, Node: node, LastSeen: t}
		}
		p.Count = count
		latest[k] = p
	}
	out := map[string][]Problem{}
	for k, p := range latest {
		out[k.svc] = append(out[k.svc], p)
	}
	for _, ps := range out {
		sort.Slice(ps, func(i, j int) bool {
			if !ps[i].LastSeen.Equal(ps[j].LastSeen) {
				return ps[i].LastSeen.After(ps[j].LastSeen)
			}
			return ps[i].Reason+ps[i].Node < ps[j].Reason+ps[j].Node
		})
	}
	return out
}
