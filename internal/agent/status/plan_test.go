package status

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

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
