package agent

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// event is one Event to record on a Service once its patch succeeded.
type event struct {
	typ, reason, message string
}

// annotationPlan is one Service whose announced-by annotation must change.
type annotationPlan struct {
	svc    *corev1.Service // from the cache; read-only
	value  string          // "" removes the annotation
	events []event
}

// planAnnotations decides which Services' announced-by annotations this
// node must patch: the entries of the addresses it owns (one patch per move,
// by the new owner), and, if it is the status writer, the removal of entries
// nobody owns any more. Services already right cost nothing.
func planAnnotations(res announce.Result, local string, svcs []corev1.Service) []annotationPlan {
	byService := map[announce.ServiceKey][]announce.Owner{}
	for _, o := range res.Owners {
		for _, k := range o.Services {
			byService[k] = append(byService[k], o)
		}
	}
	ifaces := map[netip.Addr][]string{}
	for _, e := range res.Local {
		ifaces[e.Addr] = append(ifaces[e.Addr], e.IfName)
	}
	var plans []annotationPlan
	for i := range svcs {
		svc := &svcs[i]
		key := announce.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
		cur := parseAnnouncedBy(svc.Annotations[mooringv1.AnnotationAnnouncedBy])
		want := maps.Clone(cur)
		var evs []event
		owners := byService[key]
		for _, o := range owners {
			if o.Node != local {
				continue
			}
			v := announcer(local, ifaces[o.Addr])
			if cur[o.Addr] == v {
				continue
			}
			want[o.Addr] = v
			if prev := announcerNode(cur[o.Addr]); prev != local {
				evs = append(evs, event{corev1.EventTypeNormal, mooringv1.EventReasonAnnounced, movedMessage(o.Addr, v, prev)})
			}
		}
		if local == res.StatusWriter {
			evs = append(evs, dropUnowned(want, owners)...)
		}
		if !maps.Equal(cur, want) {
			plans = append(plans, annotationPlan{svc: svc, value: formatAnnouncedBy(want), events: evs})
		}
	}
	return plans
}

// dropUnowned removes entries for addresses the Service no longer has
// announced, or that no live node may announce.
func dropUnowned(want map[netip.Addr]string, owners []announce.Owner) []event {
	var evs []event
	for _, a := range slices.SortedFunc(maps.Keys(want), netip.Addr.Compare) {
		i := slices.IndexFunc(owners, func(o announce.Owner) bool { return o.Addr == a })
		if i >= 0 && owners[i].Node != "" {
			continue
		}
		why := "it is no longer announced for this Service"
		if i >= 0 {
			why = "no live node may announce it (check the L2AnnouncementPolicies' nodeSelector and, for externalTrafficPolicy: Local, the ready endpoints)"
		}
		evs = append(evs, event{corev1.EventTypeWarning, mooringv1.EventReasonUnannounced,
			fmt.Sprintf("%s was announced by %s; %s", a, announcerNode(want[a]), why)})
		delete(want, a)
	}
	return evs
}

func movedMessage(a netip.Addr, v, prev string) string {
	node, ifs, _ := strings.Cut(v, "/")
	msg := fmt.Sprintf("%s is now announced by %s on %s", a, node, strings.ReplaceAll(ifs, "+", ", "))
	if prev != "" {
		msg += fmt.Sprintf(" (was %s)", prev)
	}
	return msg
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
