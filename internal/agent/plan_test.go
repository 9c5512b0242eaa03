package agent

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

func TestPlanAnnotations(t *testing.T) {
	a1, a2 := ip("10.213.0.100"), ip("fd00:213::64")
	web := announce.ServiceKey{Namespace: "default", Name: "web"}
	res := announce.Result{
		Owners:       []announce.Owner{{Addr: a1, Node: "node-2", Services: []announce.ServiceKey{web}}, {Addr: a2, Node: "node-1", Services: []announce.ServiceKey{web}}},
		Local:        []announce.Entry{{Addr: a1, IfIndex: 2, IfName: "eth0"}},
		StatusWriter: "node-1",
	}
	svc := lbService("default", "web", "10.213.0.100", "fd00:213::64")
	svc.Annotations = map[string]string{mooringv1.AnnotationAnnouncedBy: "10.213.0.100=node-3/eth0,fd00:213::64=node-1/eth0"}

	// node-2 took over a1 from node-3: one patch, one event, node-1's
	// entry untouched.
	plans := planAnnotations(res, "node-2", []corev1.Service{svc})
	if len(plans) != 1 || plans[0].value != "10.213.0.100=node-2/eth0,fd00:213::64=node-1/eth0" {
		t.Fatalf("plans %+v", plans)
	}
	if evs := plans[0].events; len(evs) != 1 || evs[0].reason != mooringv1.EventReasonAnnounced ||
		!strings.Contains(evs[0].message, "now announced by node-2 on eth0 (was node-3)") {
		t.Fatalf("events %+v", plans[0].events)
	}
	// Once written, nothing more to do: no periodic writes.
	svc.Annotations[mooringv1.AnnotationAnnouncedBy] = plans[0].value
	if plans := planAnnotations(res, "node-2", []corev1.Service{svc}); len(plans) != 0 {
		t.Fatalf("second round planned %+v", plans)
	}
	// node-1 owns a2 already written, and is not the status writer for
	// anything stale: nothing to do either.
	res.Local = []announce.Entry{{Addr: a2, IfIndex: 2, IfName: "eth0"}} // node-1's own view
	if plans := planAnnotations(res, "node-1", []corev1.Service{svc}); len(plans) != 0 {
		t.Fatalf("node-1 planned %+v", plans)
	}
	// The status writer drops an entry no live node may announce.
	res.Owners[0].Node = ""
	plans = planAnnotations(res, "node-1", []corev1.Service{svc})
	if len(plans) != 1 || plans[0].value != "fd00:213::64=node-1/eth0" || plans[0].events[0].reason != mooringv1.EventReasonUnannounced {
		t.Fatalf("status writer planned %+v", plans)
	}
	// An address the Service no longer has is dropped too; the annotation
	// goes entirely when empty.
	plans = planAnnotations(announce.Result{StatusWriter: "node-1"}, "node-1", []corev1.Service{svc})
	if len(plans) != 1 || plans[0].value != "" || len(plans[0].events) != 2 {
		t.Fatalf("cleanup planned %+v", plans)
	}
}

func TestPlanPolicyStatus(t *testing.T) {
	now := metav1.Now()
	pols := []mooringv1.L2AnnouncementPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "good", Generation: 1}},
		{ObjectMeta: metav1.ObjectMeta{Name: "bad", Generation: 3}},
	}
	res := announce.Result{Problems: []announce.Problem{{Policy: "bad", Field: "spec.interfaces[0]", Message: "interface expression \"eth[\" is not valid"}}}
	plans := planPolicyStatus(res, pols, now)
	if len(plans) != 2 {
		t.Fatalf("plans %+v", plans)
	}
	for _, p := range plans {
		ready := findCond(p.conditions, mooringv1.ConditionReady)
		invalid := findCond(p.conditions, mooringv1.ConditionInvalidSpec)
		wantReady := map[string]metav1.ConditionStatus{"good": metav1.ConditionTrue, "bad": metav1.ConditionFalse}[p.policy.Name]
		if ready == nil || invalid == nil || ready.Status != wantReady || ready.ObservedGeneration != p.policy.Generation {
			t.Fatalf("%s: conditions %+v", p.policy.Name, p.conditions)
		}
		if p.policy.Name == "bad" && !strings.Contains(invalid.Message, "spec.interfaces[0]") {
			t.Fatalf("InvalidSpec message %q", invalid.Message)
		}
	}
	// Applied, the same decision plans nothing.
	for i := range pols {
		pols[i].Status.Conditions = plans[i].conditions
		pols[i].Status.ObservedGeneration = pols[i].Generation
	}
	if again := planPolicyStatus(res, pols, metav1.Now()); len(again) != 0 {
		t.Fatalf("replanned %+v", again)
	}
}

func findCond(cs []metav1.Condition, typ string) *metav1.Condition {
	for i := range cs {
		if cs[i].Type == typ {
			return &cs[i]
		}
	}
	return nil
}
