package status

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
)

// Seed 004: the decision names node-2 for 10.0.0.1, but node-2's agent
// lists it as ResponderFailed (its ARP/NDP sockets do not open): status
// shows nobody announcing it, with that reason and node-2's message; a
// ResponderFailed from another node leaves the owner announcing.
func TestResponderFailedIsNotAnnounced(t *testing.T) {
	svc := *lb("demo", "echo", func(s *corev1.Service) {
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue, Reason: "Assigned"}}
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "10.0.0.1"}, {IP: "10.0.0.2"}}
	})
	failed := func(node, addr string) mooringv1.L2Announcer {
		return mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: mooringv1.L2AnnouncerStatus{
			Problems: []mooringv1.AnnouncementProblem{{Address: addr, Reason: mooringv1.ProblemResponderFailed,
				Message: node + " owns " + addr + " but its agent cannot answer ARP/NDP for it (on eth0: cannot allocate memory)"}}}}
	}
	an := Announced{Known: true, Announcers: []mooringv1.L2Announcer{failed("node-2", "10.0.0.1"), failed("node-3", "10.0.0.2")},
		Announcements: []agentstatus.Announcement{
			{Addr: netip.MustParseAddr("10.0.0.1"), Node: "node-2", Interfaces: []string{"eth0"}, Claimants: []string{"node-2"}},
			{Addr: netip.MustParseAddr("10.0.0.2"), Node: "node-1", Interfaces: []string{"eth0"}, Claimants: []string{"node-1"}},
		}}
	r := Rows([]corev1.Service{svc}, nil, an, now.Add(-time.Hour), now)[0]
	if len(r.AnnouncedBy) != 1 || r.AnnouncedBy[0].Address != "10.0.0.2" || r.AnnouncedBy[0].Node != "node-1" {
		t.Errorf("announced by %+v, want only 10.0.0.2 by node-1", r.AnnouncedBy)
	}
	if len(r.Problems) < 1 || r.Problems[0].Reason != mooringv1.ProblemResponderFailed || r.Problems[0].Node != "node-2" ||
		!r.Problems[0].Current || !strings.Contains(r.Problems[0].Message, "cannot allocate memory") {
		t.Errorf("problems %+v", r.Problems)
	}
	var out bytes.Buffer
	if err := Print(&out, OutputTable, []Row{r}, now); err != nil {
		t.Fatal(err)
	}
	if l := lines(out.String())["echo"]; !strings.Contains(l, " -,node-1/eth0 ") || !strings.Contains(l, "ResponderFailed (now)") ||
		!strings.Contains(l, "node-2 owns 10.0.0.1") {
		t.Errorf("table:\n%s", out.String())
	}
}
