package bgpagent

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgp"
)

// Condition reasons on BGPPeers and BGPAdvertisements.
const (
	ReasonValid       = "Valid"
	ReasonWarnings    = "Warnings"
	ReasonInvalidSpec = "InvalidSpec"
)

// conditionsFor turns an object's problems into its Ready and InvalidSpec
// conditions: invalid problems make it not Ready (it is not used), the
// others are listed on Ready.
func conditionsFor(gen int64, problems []bgp.Problem) []metav1.Condition {
	var invalid, warn []string
	for _, p := range problems {
		msg := p.Field + ": " + p.Message
		if p.Invalid {
			invalid = append(invalid, msg)
		} else {
			warn = append(warn, msg)
		}
	}
	ready := metav1.Condition{Type: mooringv1.ConditionReady, Status: metav1.ConditionTrue, Reason: ReasonValid, Message: "in use", ObservedGeneration: gen}
	inv := metav1.Condition{Type: mooringv1.ConditionInvalidSpec, Status: metav1.ConditionFalse, Reason: ReasonValid, Message: "the spec is valid", ObservedGeneration: gen}
	switch {
	case len(invalid) > 0:
		ready.Status, ready.Reason = metav1.ConditionFalse, ReasonInvalidSpec
		ready.Message = "not used: " + strings.Join(invalid, "; ")
		inv.Status, inv.Reason, inv.Message = metav1.ConditionTrue, ReasonInvalidSpec, strings.Join(invalid, "; ")
	case len(warn) > 0:
		ready.Reason, ready.Message = ReasonWarnings, "in use; "+strings.Join(warn, "; ")
	}
	return []metav1.Condition{ready, inv}
}

// sameConditions compares what matters (not the transition times).
func sameConditions(have, want []metav1.Condition) bool {
	for _, w := range want {
		h := meta.FindStatusCondition(have, w.Type)
		if h == nil || h.Status != w.Status || h.Reason != w.Reason || h.Message != w.Message || h.ObservedGeneration != w.ObservedGeneration {
			return false
		}
	}
	return true
}

// writeConditions patches the conditions of every BGPPeer and
// BGPAdvertisement whose conditions differ from the decision's problems:
// one write per object that changed, none in steady state. Only the one
// status-writing agent calls it.
func writeConditions(ctx context.Context, c client.Client, objs Objects, problems []bgp.Problem) error {
	by := map[bgp.Kind]map[string][]bgp.Problem{bgp.KindPeer: {}, bgp.KindAdvertisement: {}}
	for _, p := range problems {
		if m, ok := by[p.Kind]; ok {
			m[p.Object] = append(m[p.Object], p)
		}
	}
	var errs []error
	for i := range objs.Peers {
		p := &objs.Peers[i]
		want := conditionsFor(p.Generation, by[bgp.KindPeer][p.Name])
		if sameConditions(p.Status.Conditions, want) {
			continue
		}
		patch := client.MergeFrom(p.DeepCopy())
		for _, cond := range want {
			meta.SetStatusCondition(&p.Status.Conditions, cond)
		}
		p.Status.ObservedGeneration = p.Generation
		if err := c.Status().Patch(ctx, p, patch); err != nil {
			errs = append(errs, fmt.Errorf("BGPPeer %s conditions: %w", p.Name, err))
		}
	}
	for i := range objs.Advertisements {
		a := &objs.Advertisements[i]
		want := conditionsFor(a.Generation, by[bgp.KindAdvertisement][a.Name])
		if sameConditions(a.Status.Conditions, want) {
			continue
		}
		patch := client.MergeFrom(a.DeepCopy())
		for _, cond := range want {
			meta.SetStatusCondition(&a.Status.Conditions, cond)
		}
		a.Status.ObservedGeneration = a.Generation
		if err := c.Status().Patch(ctx, a, patch); err != nil {
			errs = append(errs, fmt.Errorf("BGPAdvertisement %s conditions: %w", a.Name, err))
		}
	}
	return errors.Join(errs...)
}
