package status

import (
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// Event is one Event to record.
type Event struct {
	Type, Reason, Message string
}

// policyPlan is one policy whose status must change.
type policyPlan struct {
	policy     *mooringv1.L2AnnouncementPolicy // from the cache; read-only
	conditions []metav1.Condition
}

// planPolicyStatus computes the Ready and InvalidSpec conditions of every
// policy from the decision's problems. Only the status writer calls it, so
// agents do not race on the same status.
func planPolicyStatus(res announce.Result, policies []mooringv1.L2AnnouncementPolicy, now metav1.Time) []policyPlan {
	var plans []policyPlan
	for i := range policies {
		p := &policies[i]
		conds := slices.Clone(p.Status.Conditions)
		ready := metav1.Condition{Type: mooringv1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Valid",
			Message: "the agents announce the addresses this policy selects", ObservedGeneration: p.Generation}
		invalid := metav1.Condition{Type: mooringv1.ConditionInvalidSpec, Status: metav1.ConditionFalse, Reason: "Valid",
			Message: "the spec is valid", ObservedGeneration: p.Generation}
		ready.LastTransitionTime, invalid.LastTransitionTime = now, now
		if probs := res.PolicyProblems(p.Name); len(probs) > 0 {
			var msgs []string
			for _, pr := range probs {
				msgs = append(msgs, pr.Field+": "+pr.Message)
			}
			ready.Status, ready.Reason = metav1.ConditionFalse, "InvalidSpec"
			ready.Message = "this policy is skipped until its spec is fixed; the other policies keep working"
			invalid.Status, invalid.Reason, invalid.Message = metav1.ConditionTrue, "InvalidSpec", strings.Join(msgs, "; ")
		}
		changed := meta.SetStatusCondition(&conds, ready)
		changed = meta.SetStatusCondition(&conds, invalid) || changed
		if changed || p.Status.ObservedGeneration != p.Generation {
			plans = append(plans, policyPlan{policy: p, conditions: conds})
		}
	}
	return plans
}
