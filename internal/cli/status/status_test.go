package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/yaml"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/foreignlb"
)

var now = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

func lb(ns, name string, mut func(*corev1.Service)) *corev1.Service {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
	}
	if mut != nil {
		mut(s)
	}
	return s
}

func agentEvent(ns, svc, typ, reason, msg, node string, age time.Duration) *corev1.Event {
	t := metav1.NewTime(now.Add(-age))
	return &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Namespace: ns, Name: svc + "." + reason + node + age.String()},
		InvolvedObject: corev1.ObjectReference{Kind: "Service", Namespace: ns, Name: svc},
		Type:           typ, Reason: reason, Message: msg, Count: 1,
		Source:         corev1.EventSource{Component: "mooring-agent", Host: node},
		FirstTimestamp: t, LastTimestamp: t,
	}
}

const longMessage = "pool \"blue\" has no free IPv4 address: add a block to spec.blocks or free an address held by another Service"

func fixture() *fake.Clientset {
	held := lb("demo", "echo", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "fd00:213::100"}, {IP: "10.213.0.100"}}
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue, Reason: "Assigned"}}
	})
	pending := lb("demo", "api", func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionFalse,
			Reason: "PoolExhausted", Message: longMessage}}
	})
	other := lb("demo", "metallb", func(s *corev1.Service) {
		c := "metallb.io/metallb"
		s.Spec.LoadBalancerClass = &c
	})
	unseen := lb("web", "new", nil)
	clusterIP := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "internal"}}
	return fake.NewClientset(held, pending, other, unseen, clusterIP,
		agentEvent("demo", "echo", corev1.EventTypeWarning, mooringv1.EventReasonSplitBrain, "split brain: 10.213.0.100 is announced by node-2 on eth0, but 02:00:00:00:00:09 also answered", "node-2", 2*time.Minute),
		agentEvent("demo", "echo", corev1.EventTypeWarning, mooringv1.EventReasonStaleLocalAddress, "node node-3 has 10.213.0.100 configured on kube-ipvs0", "node-3", 5*time.Minute),
		agentEvent("demo", "echo", corev1.EventTypeWarning, mooringv1.EventReasonStaleLocalAddress, "too old", "node-3", 3*time.Hour),
		// answered by a later L2Announced: not a problem any more
		agentEvent("demo", "echo", corev1.EventTypeWarning, mooringv1.EventReasonUnannounced, "no node may announce", "node-1", 10*time.Minute),
		agentEvent("demo", "echo", corev1.EventTypeNormal, mooringv1.EventReasonAnnounced, "node-2 announces", "node-2", 9*time.Minute),
		// still unanswered
		agentEvent("demo", "api", corev1.EventTypeWarning, mooringv1.EventReasonUnannounced, "no node may announce 10.213.0.101: every endpoint is on node-3, which the policy excludes", "node-1", time.Minute),
	)
}

func run(t *testing.T, output string) string {
	t.Helper()
	var out, errw bytes.Buffer
	o := Options{Output: output, Since: DefaultSince, Now: now, Announced: func(context.Context) (Announced, error) {
		return Announced{Known: true, Announcers: []mooringv1.L2Announcer{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}},
			Announcements: []agentstatus.Announcement{
				{Addr: netip.MustParseAddr("10.213.0.100"), Node: "node-2", Interfaces: []string{"eth0"}, Claimants: []string{"node-2"}},
				{Addr: netip.MustParseAddr("fd00:213::100"), Node: "node-1", Interfaces: []string{"eth0"}, Claimants: []string{"node-1"}},
			}}, nil
	}}
	if err := Run(context.Background(), fixture(), o, &out, &errw); err != nil {
		t.Fatal(err)
	}
	if errw.Len() > 0 {
		t.Errorf("stderr: %s", errw.String())
	}
	return out.String()
}

func lines(s string) map[string]string {
	out := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(s), "\n") {
		f := strings.Fields(l)
		if len(f) > 1 {
			out[f[1]] = l
		}
	}
	return out
}

func TestTable(t *testing.T) {
	out := run(t, OutputTable)
	rows := lines(out)
	if len(rows) != 5 {
		t.Fatalf("want header + 4 LoadBalancer rows:\n%s", out)
	}
	for name, want := range map[string][]string{
		"NAME":    {"ADDRESSES", "ASSIGNED", "ANNOUNCED BY", "PROBLEMS", "MESSAGE"},
		"echo":    {"fd00:213::100,10.213.0.100", "True/Assigned", "node-1/eth0,node-2/eth0", "L2SplitBrain (2m ago), StaleLocalAddress (5m ago)"},
		"api":     {"<pending>", "False/PoolExhausted", "L2Unannounced (60s ago)", longMessage[:57] + "..."},
		"metallb": {"<other class>", "not Mooring's: loadBalancerClass metallb.io/metallb"},
		"new":     {"<pending>", "no AddressAssigned condition"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[name], w) {
				t.Errorf("row %s lacks %q:\n%s", name, w, rows[name])
			}
		}
	}
	if strings.Contains(out, "too old") || strings.Contains(rows["echo"], "L2Unannounced") || strings.Contains(out, longMessage) {
		t.Errorf("old, answered or whole messages in the default table:\n%s", out)
	}
	if strings.Contains(rows["metallb"], "<pending>") {
		t.Errorf("another class's Service shown as pending: %s", rows["metallb"])
	}
}

func TestWide(t *testing.T) {
	rows := lines(run(t, OutputWide))
	for name, want := range map[string][]string{
		"NAME":    {"CLASS"},
		"echo":    {"fd00:213::100=node-1/eth0,10.213.0.100=node-2/eth0", "L2SplitBrain (2m ago, node-2)", "StaleLocalAddress: node node-3 has 10.213.0.100 configured on kube-ipvs0"},
		"api":     {longMessage, "L2Unannounced: no node may announce 10.213.0.101"},
		"metallb": {"metallb.io/metallb"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[name], w) {
				t.Errorf("wide row %s lacks %q:\n%s", name, w, rows[name])
			}
		}
	}
}

func TestJSONAndYAML(t *testing.T) {
	for _, format := range []string{OutputJSON, OutputYAML} {
		out := run(t, format)
		var l List
		var err error
		if format == OutputJSON {
			err = json.Unmarshal([]byte(out), &l)
		} else {
			err = yaml.Unmarshal([]byte(out), &l)
		}
		if err != nil {
			t.Fatalf("%s: %v\n%s", format, err, out)
		}
		if len(l.Services) != 4 {
			t.Fatalf("%s: want 4 services, got %d", format, len(l.Services))
		}
		echo := l.Services[1]
		if echo.Name != "echo" || len(echo.Problems) != 2 || echo.Problems[0].Reason != mooringv1.EventReasonSplitBrain ||
			!echo.Problems[0].LastSeen.Equal(now.Add(-2*time.Minute)) || echo.Problems[0].Node != "node-2" {
			t.Errorf("%s: echo = %+v", format, echo)
		}
		if m := l.Services[2]; m.Name != "metallb" || !m.OtherClass || m.Class != "metallb.io/metallb" {
			t.Errorf("%s: metallb = %+v", format, m)
		}
		if a := l.Services[0]; a.Name != "api" || a.Assigned == nil || a.Assigned.Message != longMessage {
			t.Errorf("%s: api = %+v", format, a)
		}
	}
}

func TestBadOutput(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), fixture(), Options{Output: "xml"}, &out, &out)
	if err == nil || !strings.Contains(err.Error(), "table, wide, json or yaml") {
		t.Errorf("-o xml: %v", err)
	}
}

func TestAnnouncedByOnceWhenSame(t *testing.T) {
	r := Row{Addresses: []string{"10.0.0.1", "fd00::1"}, AnnouncedBy: []Announcement{{Address: "10.0.0.1", By: "node-2/eth0"}, {Address: "fd00::1", By: "node-2/eth0"}}}
	if got := announcedBy(r, false); got != "node-2/eth0" {
		t.Errorf("same announcer: %q", got)
	}
	if got := announcedBy(r, true); got != "10.0.0.1=node-2/eth0,fd00::1=node-2/eth0" {
		t.Errorf("wide: %q", got)
	}
	r.AnnouncedBy = r.AnnouncedBy[:1] // the IPv6 address is not announced
	if got := announcedBy(r, false); got != "node-2/eth0,-" {
		t.Errorf("one of two: %q", got)
	}
}

// Every address nobody announces has a reason: the L2Announcer's own
// problem when one lists it, else the one the recomputed decision gives;
// an unreadable API leaves ANNOUNCED BY empty with a warning.
func TestCurrentProblems(t *testing.T) {
	svc := func(name string, ips ...string) corev1.Service {
		return *lb("demo", name, func(s *corev1.Service) {
			s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue, Reason: "Assigned"}}
			for _, ip := range ips {
				s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
			}
		})
	}
	an := Announced{Known: true,
		Announcers: []mooringv1.L2Announcer{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: mooringv1.L2AnnouncerStatus{
			Problems: []mooringv1.AnnouncementProblem{{Address: "10.0.0.2", Reason: mooringv1.ProblemNoMatchingInterface, Message: "no interface matches eth9"}}}}},
		Announcements: []agentstatus.Announcement{
			{Addr: netip.MustParseAddr("10.0.0.1"), Node: "node-2", Interfaces: []string{"eth0", "eth1"}, Claimants: []string{"node-2"}},
			{Addr: netip.MustParseAddr("10.0.0.2"), Node: "node-1", Claimants: []string{"node-1"}, Reason: "no match"},
			{Addr: netip.MustParseAddr("10.0.0.3"), Reason: "every endpoint is on node-3, which the policy excludes"},
			{Addr: netip.MustParseAddr("10.0.0.5"), Node: "node-1", Interfaces: []string{"eth0"}, Claimants: []string{"node-1", "node-2"}, Reason: "the agents disagree"},
		}}
	rows := Rows([]corev1.Service{svc("a", "10.0.0.1", "10.0.0.2"), svc("b", "10.0.0.3", "10.0.0.4"), svc("c", "10.0.0.5")}, nil, an, now.Add(-time.Hour), now)
	a, b, c := rows[0], rows[1], rows[2]
	if len(a.AnnouncedBy) != 2 || a.AnnouncedBy[0].By != "node-2/eth0+eth1" || a.AnnouncedBy[1].By != "node-1" ||
		len(a.Problems) != 1 || a.Problems[0].Reason != mooringv1.ProblemNoMatchingInterface || a.Problems[0].Node != "node-1" ||
		a.Problems[0].Message != "10.0.0.2: no interface matches eth9" || !a.Problems[0].Current {
		t.Errorf("a = %+v", a)
	}
	if len(b.AnnouncedBy) != 0 || len(b.Problems) != 2 || b.Problems[0].Reason != mooringv1.ProblemNoEligibleNode ||
		!strings.HasPrefix(b.Problems[0].Message, "10.0.0.3: every endpoint") || b.Problems[1].Reason != ReasonNotAnnounced {
		t.Errorf("b = %+v", b)
	}
	if len(c.AnnouncedBy) != 1 || len(c.Problems) != 1 || c.Problems[0].Reason != ReasonAgentsDisagree {
		t.Errorf("c = %+v", c)
	}
	var out bytes.Buffer
	if err := Print(&out, OutputTable, rows, now); err != nil {
		t.Fatal(err)
	}
	if l := lines(out.String()); !strings.Contains(l["b"], "NoEligibleNode (now), NotAnnounced (now)") || !strings.Contains(l["a"], "node-2/eth0+eth1,node-1") {
		t.Errorf("table:\n%s", out.String())
	}
	// MESSAGE says why an address is not announced: the first current
	// problem's message, cut like the rest.
	if l := lines(out.String()); !strings.HasSuffix(l["b"], (b.Problems[0].Message)[:messageWidth-3]+"...") ||
		!strings.HasSuffix(l["a"], "10.0.0.2: no interface matches eth9") {
		t.Errorf("MESSAGE of unannounced addresses:\n%s", out.String())
	}
	// No agent at all: still a reason.
	rows = Rows([]corev1.Service{svc("d", "10.0.0.9")}, nil, Announced{Known: true}, now, now)
	if p := rows[0].Problems; len(p) != 1 || !strings.Contains(p[0].Message, "is `mooring agent` running?") {
		t.Errorf("no agents: %+v", p)
	}

	var errw bytes.Buffer
	out.Reset()
	o := Options{Output: OutputTable, Since: DefaultSince, Now: now, Announced: func(context.Context) (Announced, error) {
		return Announced{}, errors.New("l2announcers.mooring.dev is forbidden")
	}}
	if err := Run(context.Background(), fixture(), o, &out, &errw); err != nil || !strings.Contains(errw.String(), "forbidden") {
		t.Errorf("forbidden: %v, stderr %q", err, errw.String())
	}
}

// During a migration (issue 18): with the controller in --adopt-only and
// MetalLB serving, a Service says who serves it — MetalLB's speaker from
// its ServiceL2Status — instead of "the controller has not seen this
// Service" and NotAnnounced (now).
func TestMigrationAware(t *testing.T) {
	web := *lb("d", "web", func(s *corev1.Service) {
		s.Annotations = map[string]string{"metallb.io/ip-allocated-from-pool": "lab"}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.213.0.101"}, {IP: "fd00:213::101"}}
	})
	gone := *lb("d", "gone", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.213.0.102"}}
	})
	ot := Others{Known: true, LeaseName: "mooring-system/mooring-controller",
		Controller: controller.Mode{Found: true, Holder: "c-0", Alive: true, Published: true, AdoptOnly: true, DefaultClass: true},
		Foreign: foreignlb.Snapshot{MetalLB: foreignlb.MetalLBState{
			Speakers:   []foreignlb.Workload{{Kind: "Pod", Namespace: "metallb-system", Name: "speaker-node-2", Node: "node-2"}},
			Announcers: map[string]foreignlb.L2Status{"d/web": {Node: "node-2", Interfaces: []string{"eth0"}, Object: "metallb-system/l2-x"}},
			Allocated:  map[string]string{"d/web": "lab"},
		}}}
	// Before the migration: Mooring announces nothing.
	an := Announced{Known: true, Others: ot, Announcers: []mooringv1.L2Announcer{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}}
	rows := Rows([]corev1.Service{web, gone}, nil, an, now.Add(-time.Hour), now)
	g, w := rows[0], rows[1]
	if len(w.Problems) != 0 || len(w.AnnouncedBy) != 2 || w.AnnouncedBy[0].Implementation != foreignlb.MetalLB ||
		w.AnnouncedBy[0].Source != "ServiceL2Status metallb-system/l2-x" {
		t.Errorf("web before: %+v", w)
	}
	msg := strings.Join(w.Messages, "; ")
	for _, want := range []string{"served by MetalLB (ServiceL2Status metallb-system/l2-x, announced from node-2/eth0)", "MetalLB's pool lab", "runs --adopt-only"} {
		if !strings.Contains(msg, want) {
			t.Errorf("web's message lacks %q: %s", want, msg)
		}
	}
	if strings.Contains(msg, "has not seen") {
		t.Errorf("web's message: %s", msg)
	}
	// gone: no other controller serves it, the controller only adopts.
	if m := strings.Join(g.Messages, "; "); !strings.Contains(m, "no other controller serves it") || !strings.Contains(m, "without --adopt-only") {
		t.Errorf("gone: %s", m)
	}
	var out bytes.Buffer
	if err := printDoc(&out, OutputTable, List{Services: rows, Notes: ot.Notes()}, now); err != nil {
		t.Fatal(err)
	}
	if l := lines(out.String()); !strings.Contains(l["web"], "node-2/eth0 (MetalLB)") || strings.Contains(l["web"], "NotAnnounced") {
		t.Errorf("table:\n%s", out.String())
	}
	for _, want := range []string{"MetalLB runs: 1 speaker Pod(s) (on node-2), 0 controller Pod(s); its speakers announce 1 Service(s) now", "The Mooring controller runs --adopt-only"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("notes lack %q:\n%s", want, out.String())
		}
	}
	// During: Mooring's agent on node-2 answers too.
	an.Announcements = []agentstatus.Announcement{
		{Addr: netip.MustParseAddr("10.213.0.101"), Node: "node-2", Interfaces: []string{"eth0"}, Claimants: []string{"node-2"}},
		{Addr: netip.MustParseAddr("fd00:213::101"), Node: "node-2", Interfaces: []string{"eth0"}, Claimants: []string{"node-2"}},
	}
	w = Rows([]corev1.Service{web}, nil, an, now.Add(-time.Hour), now)[0]
	if got := announcedBy(w, false); got != "node-2/eth0 (Mooring, MetalLB)" {
		t.Errorf("during: %q", got)
	}
	// MetalLB's speaker answers on every interface: its status names none.
	ot.Foreign.MetalLB.Announcers["d/web"] = foreignlb.L2Status{Node: "node-2", Object: "metallb-system/l2-x"}
	an.Others = ot
	w = Rows([]corev1.Service{web}, nil, an, now.Add(-time.Hour), now)[0]
	if got := announcedBy(w, false); got != "node-2/eth0 (Mooring, MetalLB)" {
		t.Errorf("during, no interface in the ServiceL2Status: %q", got)
	}
	an.Announcements[0].Node, an.Announcements[1].Node = "node-1", "node-1"
	an.Announcements[0].Claimants, an.Announcements[1].Claimants = []string{"node-1"}, []string{"node-1"}
	w = Rows([]corev1.Service{web}, nil, an, now.Add(-time.Hour), now)[0]
	if got := announcedBy(w, false); got != "node-1/eth0 (Mooring) & node-2 (MetalLB)" {
		t.Errorf("during, two nodes: %q", got)
	}
	// Without Others (an older status, or unreadable): as before.
	w = Rows([]corev1.Service{web}, nil, Announced{Known: true, Announcers: an.Announcers}, now.Add(-time.Hour), now)[0]
	if len(w.Problems) != 2 || w.Problems[0].Reason != ReasonNotAnnounced || !strings.Contains(strings.Join(w.Messages, ""), "has not seen this Service") {
		t.Errorf("without Others: %+v", w)
	}
}
