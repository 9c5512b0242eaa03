package bgpagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

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

// conditionsTimeout bounds writeConditions (a var for the test).
var conditionsTimeout = 5 * time.Second

// writeConditions patches the conditions of every BGPPeer and
// BGPAdvertisement whose conditions differ from the decision's problems:
// one write per object that changed, none in steady state. Only the one
// status-writing agent calls it.
func writeConditions(ctx context.Context, c client.Client, objs Objects, problems []bgp.Problem) error {
	// The decision waits for these writes: an API server that hangs must
	// not hold it longer than conditionsTimeout (the next decision writes
	// what is still wrong).
	ctx, cancel := context.WithTimeout(ctx, conditionsTimeout)
	defer cancel()
	by := map[bgp.Kind]map[string][]bgp.Problem{bgp.KindPeer: {}, bgp.KindAdvertisement: {}}
	for _, p := range problems {
		if m, ok := by[p.Kind]; ok {
			m[p.Object] = append(m[p.Object], p)
		}
	}
	var errs []error
	for i := range objs.Peers {
		p := &objs.Peers[i]
		errs = append(errs, patchConditions(ctx, c, p, &p.Status.Conditions, &p.Status.ObservedGeneration,
			conditionsFor(p.Generation, by[bgp.KindPeer][p.Name]), "BGPPeer"))
	}
	for i := range objs.Advertisements {
		a := &objs.Advertisements[i]
		errs = append(errs, patchConditions(ctx, c, a, &a.Status.Conditions, &a.Status.ObservedGeneration,
			conditionsFor(a.Generation, by[bgp.KindAdvertisement][a.Name]), "BGPAdvertisement"))
	}
	return errors.Join(errs...)
}

// patchConditions patches obj's status conditions (conds, observed point
// into obj's status) to want, unless they already say it: one write per
// object that changed.
func patchConditions(ctx context.Context, c client.Client, obj client.Object, conds *[]metav1.Condition, observed *int64, want []metav1.Condition, kind string) error {
	if sameConditions(*conds, want) {
		return nil
	}
	patch := client.MergeFrom(obj.DeepCopyObject().(client.Object))
	for _, cond := range want {
		meta.SetStatusCondition(conds, cond)
	}
	*observed = obj.GetGeneration()
	if err := c.Status().Patch(ctx, obj, patch); err != nil {
		return fmt.Errorf("%s %s conditions: %w", kind, obj.GetName(), err)
	}
	return nil
}
