package controller

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// Reasons of the conditions and Events Mooring writes on Services, besides
// the core's lbipam.Reason values.
const (
	ReasonAddressAssigned = "AddressAssigned"
	ReasonNoWarning       = "AddressesInPools"
	actionAssign          = "AssignAddress"
	actionPending         = "AddressPending"
	actionKeep            = "KeepAddress"
	maxNote               = 1000 // events.k8s.io limits a note to 1 kB
)

// svcEvent is an Event to emit after the status write succeeded, so a
// failed write that is retried never emits twice.
type svcEvent struct {
	warning      bool
	reason, note string
	action       string
}

// desiredStatus returns the Service's status as it should be and the
// Events its condition transitions deserve. invalid is the error of an
// unusable request (nil when the request parsed).
func desiredStatus(svc *corev1.Service, res lbipam.Result, invalid error, now metav1.Time) (corev1.ServiceStatus, []svcEvent) {
	st := *svc.Status.DeepCopy()
	st.LoadBalancer.Ingress = ingressFor(svc.Status.LoadBalancer.Ingress, res.Addrs)
	var evs []svcEvent
	assigned := assignedCondition(res, invalid)
	evs = appendTransition(evs, st.Conditions, assigned, actionFor(assigned))
	setCondition(&st.Conditions, assigned, svc.Generation, now)

	for _, c := range warningConditions(res) {
		if c.Status == metav1.ConditionTrue {
			evs = appendTransition(evs, st.Conditions, c, actionKeep)
			setCondition(&st.Conditions, c, svc.Generation, now)
		} else {
			meta.RemoveStatusCondition(&st.Conditions, c.Type)
		}
	}
	return st, evs
}

func actionFor(c metav1.Condition) string {
	if c.Status == metav1.ConditionTrue {
		return actionAssign
	}
	return actionPending
}

func setCondition(conds *[]metav1.Condition, c metav1.Condition, gen int64, now metav1.Time) {
	c.ObservedGeneration = gen
	c.LastTransitionTime = now // kept by SetStatusCondition when the status did not change
	meta.SetStatusCondition(conds, c)
}

// appendTransition adds an Event when c's status or reason differs from
// the condition of the same type in old: Events mark changes, so a steady
// Service emits none, even across restarts.
//
// A first assignment, with no earlier condition, gets no Event: the address
// in the status and the condition say it, and an Event would double the
// writes of the commonest convergence (10,000 new Services cost 10,000
// writes, not 20,000). An assignment that ends a pending state does get
// one, closing the story its Warning started.
func appendTransition(evs []svcEvent, old []metav1.Condition, c metav1.Condition, action string) []svcEvent {
	prev := meta.FindStatusCondition(old, c.Type)
	if prev != nil && prev.Status == c.Status && prev.Reason == c.Reason {
		return evs
	}
	warning := c.Type != mooringv1.ConditionAddressAssigned || c.Status != metav1.ConditionTrue
	if !warning && prev == nil {
		return evs
	}
	return append(evs, svcEvent{warning: warning, reason: c.Reason, note: truncate(c.Message, maxNote), action: action})
}

func assignedCondition(res lbipam.Result, invalid error) metav1.Condition {
	c := metav1.Condition{Type: mooringv1.ConditionAddressAssigned}
	switch {
	case invalid != nil:
		c.Status, c.Reason = metav1.ConditionFalse, string(lbipam.ReasonInvalidRequest)
		c.Message = invalid.Error() + " (the Service keeps the addresses it holds; nothing new is assigned until this is fixed)"
	case len(res.Pending) > 0:
		c.Status, c.Reason = metav1.ConditionFalse, string(res.Pending[0].Reason)
		c.Message = joinProblems(res.Pending)
	default:
		c.Status, c.Reason = metav1.ConditionTrue, ReasonAddressAssigned
		c.Message = "assigned " + describeAddrs(res)
	}
	c.Message = truncate(c.Message, 32768)
	return c
}

// warningConditions maps the core's warnings about held addresses to one
// condition per kind; kinds without a warning come back False so the
// caller removes them.
func warningConditions(res lbipam.Result) []metav1.Condition {
	kinds := []struct {
		typ    string
		reason lbipam.Reason
	}{
		{mooringv1.ConditionAddressOutsidePools, lbipam.ReasonHeldOutsidePools},
		{mooringv1.ConditionAddressDuplicated, lbipam.ReasonHeldDuplicate},
	}
	out := make([]metav1.Condition, 0, len(kinds))
	for _, k := range kinds {
		var ps []lbipam.Problem
		for _, w := range res.Warnings {
			if w.Reason == k.reason {
				ps = append(ps, w)
			}
		}
		c := metav1.Condition{Type: k.typ, Status: metav1.ConditionFalse, Reason: ReasonNoWarning}
		if len(ps) > 0 {
			c.Status, c.Reason, c.Message = metav1.ConditionTrue, string(k.reason), truncate(joinProblems(ps), 32768)
		}
		out = append(out, c)
	}
	return out
}

// joinProblems joins the messages, each once (an invalid request is
// pending in every family with the same message).
func joinProblems(ps []lbipam.Problem) string {
	msgs := make([]string, 0, len(ps))
	for _, p := range ps {
		if !slices.Contains(msgs, p.Message) {
			msgs = append(msgs, p.Message)
		}
	}
	return strings.Join(msgs, "; ")
}

func describeAddrs(res lbipam.Result) string {
	parts := make([]string, 0, len(res.Addrs))
	for i, a := range res.Addrs {
		pool := ""
		if i < len(res.Pools) {
			pool = res.Pools[i]
		}
		if pool == "" {
			parts = append(parts, a.String()+" (outside every pool)")
		} else {
			parts = append(parts, fmt.Sprintf("%s from pool %s", a, pool))
		}
	}
	return strings.Join(parts, ", ")
}

// ingressFor returns the ingress list for addrs. When the Service already
// lists exactly these IPs it is returned unchanged (order included), so an
// address another controller wrote is adopted as it is; otherwise existing
// entries are reused (keeping ipMode and ports) and new ones added.
func ingressFor(cur []corev1.LoadBalancerIngress, addrs []netip.Addr) []corev1.LoadBalancerIngress {
	if sameIPs(cur, addrs) {
		return cur
	}
	out := make([]corev1.LoadBalancerIngress, 0, len(addrs))
	vip := corev1.LoadBalancerIPModeVIP
	for _, a := range addrs {
		i := slices.IndexFunc(cur, func(ing corev1.LoadBalancerIngress) bool { return ingressAddr(ing) == a })
		if i >= 0 {
			out = append(out, cur[i])
		} else {
			out = append(out, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &vip})
		}
	}
	return out
}

func ingressAddr(ing corev1.LoadBalancerIngress) netip.Addr {
	a, err := netip.ParseAddr(ing.IP)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func sameIPs(cur []corev1.LoadBalancerIngress, addrs []netip.Addr) bool {
	if len(cur) != len(addrs) {
		return false
	}
	for _, ing := range cur {
		if !slices.Contains(addrs, ingressAddr(ing)) {
			return false
		}
	}
	return true
}

// statusEqual compares what Mooring writes; everything else in desired was
// copied from cur.
func statusEqual(cur, desired *corev1.ServiceStatus) bool {
	return equality.Semantic.DeepEqual(cur.LoadBalancer.Ingress, desired.LoadBalancer.Ingress) &&
		equality.Semantic.DeepEqual(cur.Conditions, desired.Conditions)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
