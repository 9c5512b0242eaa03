package status

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

func TestAnnouncerStatusProblems(t *testing.T) {
	web := announce.ServiceKey{Namespace: "default", Name: "web"}
	res := announce.Result{StatusWriter: "node-1", Listen: []announce.Interface{{Name: "eth0", Index: 2}}}
	a := netip.MustParseAddr("10.0.0.0")
	for i := range 100 { // nobody may announce these
		a = a.Next()
		res.Owners = append(res.Owners, announce.Owner{Addr: a, Services: []announce.ServiceKey{web}})
		res.Problems = append(res.Problems, announce.Problem{Addr: a, Message: fmt.Sprintf("no live node may announce %d", i)})
	}
	owned := netip.MustParseAddr("10.1.0.1") // node-2 owns it, no interface matches
	res.Owners = append(res.Owners, announce.Owner{Addr: owned, Node: "node-2", Services: []announce.ServiceKey{web}})
	res.Problems = append(res.Problems, announce.Problem{Addr: owned, Message: "no interface"},
		announce.Problem{Policy: "broken", Field: "spec.interfaces[0]", Message: "bad"})

	st := announcerStatus(Decision{Res: res, Members: []string{"node-2", "node-1", "node-2"}}, "node-1")
	if !st.StatusWriter || st.ProblemCount != 100 || len(st.Problems) != mooringv1.MaxAnnouncerProblems ||
		st.Problems[0].Reason != mooringv1.ProblemNoEligibleNode || st.Problems[0].Services[0] != "default/web" {
		t.Fatalf("status writer's status: writer %v, %d problems listed of %d, first %+v", st.StatusWriter, len(st.Problems), st.ProblemCount, st.Problems[0])
	}
	if fmt.Sprint(st.Members) != "[node-1 node-2]" || len(st.Interfaces) != 1 || st.Interfaces[0].Name != "eth0" {
		t.Fatalf("members %v, interfaces %v", st.Members, st.Interfaces)
	}
	st = announcerStatus(Decision{Res: res}, "node-2")
	if st.StatusWriter || st.ProblemCount != 1 || st.Problems[0].Address != "10.1.0.1" || st.Problems[0].Reason != mooringv1.ProblemNoMatchingInterface {
		t.Fatalf("owner's status %+v", st)
	}
	if st := announcerStatus(Decision{Res: res}, "node-3"); st.ProblemCount != 0 {
		t.Fatalf("a bystander reports %+v", st.Problems)
	}
}

func TestChangeEvents(t *testing.T) {
	web := announce.ServiceKey{Namespace: "default", Name: "web"}
	a1, a2, a3 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	res := announce.Result{StatusWriter: "node-1",
		Owners: []announce.Owner{{Addr: a1, Node: "node-2", Services: []announce.ServiceKey{web}}, {Addr: a2, Node: "node-2", Services: []announce.ServiceKey{web}},
			{Addr: a3, Services: []announce.ServiceKey{web}}},
		Local: []announce.Entry{{Addr: a1, IfIndex: 2, IfName: "eth0"}, {Addr: a2, IfIndex: 2, IfName: "eth0"}}}
	changes := []announce.Change{
		{Addr: a1, To: "node-2"},                                // first announcement: no Event
		{Addr: a2, From: "node-3", To: "node-2"},                // a move to node-2
		{Addr: a3, From: "node-2"},                              // lost: the status writer reports it
		{Addr: a1, From: "node-2", To: "node-2"},                // interfaces only
		{Addr: netip.MustParseAddr("10.0.0.9"), From: "node-2"}, // gone with its Service: nothing to record on
	}
	got := ChangeEvents(changes, res, "node-2")
	if len(got) != 1 || got[0].ev.Reason != mooringv1.EventReasonAnnounced || !strings.Contains(got[0].ev.Message, "10.0.0.2 is now announced by node-2 on eth0 (was node-3)") {
		t.Fatalf("node-2's events %+v", got)
	}
	got = ChangeEvents(changes, res, "node-1")
	if len(got) != 1 || got[0].ev.Reason != mooringv1.EventReasonUnannounced || !strings.Contains(got[0].ev.Message, "10.0.0.3 was announced by node-2") {
		t.Fatalf("status writer's events %+v", got)
	}
	// Unannounced from the start: the status writer says so once.
	got = ChangeEvents([]announce.Change{{Addr: a3}}, res, "node-1")
	if len(got) != 1 || got[0].ev.Reason != mooringv1.EventReasonUnannounced || !strings.Contains(got[0].ev.Message, "no live node may announce 10.0.0.3") {
		t.Fatalf("unannounced from the start: %+v", got)
	}
	q := &EventQueue{}
	for range maxQueuedEvents + 5 {
		q.Add(got...)
	}
	if items, dropped := q.take(); len(items) != maxQueuedEvents || dropped != 5 {
		t.Fatalf("queue kept %d, dropped %d", len(items), dropped)
	}
}

// Seed 004: an owner whose responder cannot open an interface lists every
// address it answers for there as ResponderFailed (with the interface and
// the error), sorted among its other problems; the same decision with the
// responder healthy lists none.
func TestAnnouncerStatusResponderFailed(t *testing.T) {
	web := announce.ServiceKey{Namespace: "default", Name: "web"}
	a1, a2, a3 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.3")
	res := announce.Result{StatusWriter: "node-1",
		Owners: []announce.Owner{{Addr: a1, Node: "node-2", Services: []announce.ServiceKey{web}},
			{Addr: a2, Node: "node-2", Services: []announce.ServiceKey{web}}, {Addr: a3, Node: "node-2", Services: []announce.ServiceKey{web}}},
		Local:    []announce.Entry{{Addr: a1, IfIndex: 2, IfName: "eth0"}, {Addr: a3, IfIndex: 2, IfName: "eth0"}, {Addr: a3, IfIndex: 3, IfName: "eth1"}},
		Problems: []announce.Problem{{Addr: a2, Message: "no interface"}}}
	if st := announcerStatus(Decision{Res: res}, "node-2"); st.ProblemCount != 1 {
		t.Fatalf("healthy responder: %+v", st.Problems)
	}
	st := announcerStatus(Decision{Res: res, Unanswered: map[int]string{2: "cannot allocate memory"}}, "node-2")
	var got []string
	for _, p := range st.Problems {
		got = append(got, p.Address+" "+p.Reason)
	}
	if st.ProblemCount != 3 || strings.Join(got, ",") != "10.0.0.1 ResponderFailed,10.0.0.2 NoMatchingInterface,10.0.0.3 ResponderFailed" {
		t.Fatalf("responder failing on eth0: %d problems %v", st.ProblemCount, got)
	}
	if m := st.Problems[2].Message; !strings.Contains(m, "node-2 owns 10.0.0.3") || !strings.Contains(m, "on eth0: cannot allocate memory") ||
		strings.Contains(m, "eth1") || st.Problems[2].Services[0] != "default/web" {
		t.Fatalf("message %+v", st.Problems[2])
	}
}
