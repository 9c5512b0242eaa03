package status

import (
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
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
	// AnnouncedBy has one entry per announced address, from the agent's
	// mooring.dev/announced-by annotation.
	AnnouncedBy []Announcement `json:"announcedBy,omitempty"`
	// Messages are what needs the operator's attention now: conditions that
	// are not as they should be.
	Messages []string `json:"messages,omitempty"`
	// Problems are recent Warning Events the agents recorded (split brain,
	// stale local copies, unannounced addresses).
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
	// By is "node/interface[+interface]", as the agent wrote it.
	By string `json:"by"`
}

// Problem is one Warning Event an agent recorded on the Service.
type Problem struct {
	Reason   string    `json:"reason"`
	Message  string    `json:"message"`
	Node     string    `json:"node,omitempty"`
	Count    int32     `json:"count"`
	LastSeen time.Time `json:"lastSeen"`
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

// Rows turns LoadBalancer Services and the Events of their namespaces
// into sorted rows; other Services are skipped. Warning Events of the
// agents newer than since are the rows' problems, except an L2Unannounced
// that a later L2Announced has answered.
func Rows(svcs []corev1.Service, events []corev1.Event, since time.Time) []Row {
	byService := problemsByService(events, since)
	var rows []Row
	for i := range svcs {
		s := &svcs[i]
		if s.Spec.Type != corev1.ServiceTypeLoadBalancer {
			continue
		}
		r := row(s)
		r.Problems = byService[s.Namespace+"/"+s.Name]
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
	r.AnnouncedBy = announcements(s.Annotations[mooringv1.AnnotationAnnouncedBy], r.Addresses)
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
	if r.Assigned == nil {
		r.Messages = append(r.Messages, "no AddressAssigned condition: the controller has not seen this Service "+
			"(is `mooring controller` running? with --default-class=false it serves only loadBalancerClass "+mooringv1.LoadBalancerClass+")")
	}
	return r
}

// announcements reads the announced-by annotation ("addr=node/if,...")
// in the order of the Service's addresses, then any others.
func announcements(v string, addrs []string) []Announcement {
	by := map[netip.Addr]string{}
	var order []netip.Addr
	for _, e := range strings.Split(v, ",") {
		k, who, ok := strings.Cut(strings.TrimSpace(e), "=")
		a, err := netip.ParseAddr(k)
		if !ok || who == "" || err != nil {
			continue // user-editable; skip what does not parse
		}
		by[a.Unmap()] = who
		order = append(order, a.Unmap())
	}
	var out []Announcement
	seen := map[netip.Addr]bool{}
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		if who, ok := by[a.Unmap()]; ok {
			out = append(out, Announcement{Address: a.Unmap().String(), By: who})
			seen[a.Unmap()] = true
		}
	}
	for _, a := range order {
		if !seen[a] {
			out = append(out, Announcement{Address: a.String(), By: by[a]})
		}
	}
	return out
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
