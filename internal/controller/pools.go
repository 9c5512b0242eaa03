package controller

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// allPools is the single work item of the pool controller: any pool event
// means "recompile the pool set", so events coalesce in the queue.
var allPools = reconcile.Request{NamespacedName: types.NamespacedName{Name: "all-pools"}}

// poolReconciler feeds pool changes into the core. It writes nothing; the
// pool status writer does, at a bounded rate.
type poolReconciler struct {
	c  client.Client
	st *state
}

func (r *poolReconciler) setup(mgr manager.Manager) error {
	// Nodes, L2AnnouncementPolicies and L2Announcers only feed the pools'
	// subnet condition: a change asks the status writer for a recompute.
	kick := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		r.st.kick()
		return nil
	})
	return builder.ControllerManagedBy(mgr).
		Named("lbipam-pools").
		Watches(&mooringv1.LoadBalancerIPPool{},
			handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
				return []reconcile.Request{allPools}
			})).
		Watches(&corev1.Node{}, kick, builder.WithPredicates(predicate.LabelChangedPredicate{})).
		Watches(&mooringv1.L2AnnouncementPolicy{}, kick, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		// Only the interfaces matter; members and problems change more often.
		Watches(&mooringv1.L2Announcer{}, kick, builder.WithPredicates(predicate.Funcs{
			UpdateFunc: func(e event.UpdateEvent) bool {
				o, ok1 := e.ObjectOld.(*mooringv1.L2Announcer)
				n, ok2 := e.ObjectNew.(*mooringv1.L2Announcer)
				return !ok1 || !ok2 || !equality.Semantic.DeepEqual(o.Status.Interfaces, n.Status.Interfaces)
			}})).
		Complete(r)
}

func (r *poolReconciler) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	if err := r.st.waitOpen(ctx); err != nil {
		return reconcile.Result{}, err
	}
	in, err := listPools(ctx, r.c)
	if err != nil {
		return reconcile.Result{}, err
	}
	r.st.setPools(in)
	return reconcile.Result{}, nil
}

func listPools(ctx context.Context, c client.Reader) ([]poolInput, error) {
	var list mooringv1.LoadBalancerIPPoolList
	if err := c.List(ctx, &list); err != nil {
		return nil, err
	}
	out := make([]poolInput, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].DeletionTimestamp.IsZero() {
			out = append(out, toPool(&list.Items[i]))
		}
	}
	return out, nil
}

// poolStatusWriter recomputes pool status and metrics when kicked, at most
// once per interval, and re-enqueues pending Services when addresses were
// freed or pools changed. This is what keeps 10,000 allocations from
// costing 10,000 pool writes.
type poolStatusWriter struct {
	c        client.Client
	st       *state
	clock    clock.PassiveClock
	log      *slog.Logger
	interval time.Duration
}

func (w *poolStatusWriter) Start(ctx context.Context) error {
	if err := w.st.waitOpen(ctx); err != nil {
		return nil
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.st.dirty:
		}
		w.flush(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(w.interval):
		}
	}
}

func (w *poolStatusWriter) flush(ctx context.Context) {
	reports, inputs := w.snapshot()
	var subnets *nodeSubnets
	if ns, err := readNodeSubnets(ctx, w.c); err != nil {
		w.log.Warn("Nodes, L2AnnouncementPolicies or L2Announcers not readable; pool subnet conditions left as they are", "err", err)
	} else {
		subnets = &ns
	}
	for _, k := range w.st.takeRequeue() {
		select {
		case w.st.requeue <- requeueEvent(k):
		case <-ctx.Done():
			return
		}
	}
	for _, rep := range reports {
		if err := w.writePool(ctx, rep, inputs[rep.Name], subnets); err != nil && ctx.Err() == nil {
			w.log.Warn("pool status not written; retrying", "pool", rep.Name, "err", err)
			w.st.kick()
		}
	}
}

// snapshot takes the reports and refreshes the metrics under the lock.
func (w *poolStatusWriter) snapshot() ([]lbipam.PoolReport, map[string]poolInput) {
	s := w.st
	s.mu.Lock()
	defer s.mu.Unlock()
	reports := s.alloc.Reports()
	inputs := make(map[string]poolInput, len(s.pools))
	for k, v := range s.pools {
		inputs[k] = v
	}
	pending := map[lbipam.Reason]int{}
	for _, r := range s.pending {
		pending[r]++
	}
	outside := 0
	for _, r := range s.warned {
		if r == lbipam.ReasonHeldOutsidePools {
			outside++
		}
	}
	adopted := map[string]int{adoptedInPools: 0, adoptedOutsidePools: 0, adoptedNoAddress: 0}
	for _, st := range s.adopted {
		adopted[st]++
	}
	s.m.observe(reports, pending, outside)
	s.m.observeAdopted(adopted)
	return reports, inputs
}

func (w *poolStatusWriter) writePool(ctx context.Context, rep lbipam.PoolReport, in poolInput, subnets *nodeSubnets) error {
	var p mooringv1.LoadBalancerIPPool
	if err := w.c.Get(ctx, types.NamespacedName{Name: rep.Name}, &p); err != nil {
		return client.IgnoreNotFound(err)
	}
	desired := desiredPoolStatus(&p, rep, in, subnets, metav1.NewTime(w.clock.Now()))
	if equality.Semantic.DeepEqual(p.Status, desired) {
		return nil
	}
	old := p.DeepCopy()
	p.Status = desired
	err := w.c.Status().Patch(ctx, &p, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{}))
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// desiredPoolStatus: subnets nil leaves the subnet condition as it is.
func desiredPoolStatus(p *mooringv1.LoadBalancerIPPool, rep lbipam.PoolReport, in poolInput, subnets *nodeSubnets, now metav1.Time) mooringv1.LoadBalancerIPPoolStatus {
	st := *p.Status.DeepCopy()
	st.ObservedGeneration = p.Generation
	st.IPv4, st.IPv6 = familyUsage(rep.IPv4), familyUsage(rep.IPv6)
	set := func(typ string, ok bool, reason, msg string) {
		status := metav1.ConditionFalse
		if ok {
			status = metav1.ConditionTrue
		}
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: typ, Status: status, Reason: reason,
			Message: truncate(msg, 32768), ObservedGeneration: p.Generation, LastTransitionTime: now})
	}
	invalid := append(slices.Clone(in.invalidBlocks), rep.Invalid...)
	if len(invalid) > 0 {
		set(mooringv1.ConditionInvalidBlocks, true, "InvalidBlocks", strings.Join(invalid, "; "))
	} else {
		set(mooringv1.ConditionInvalidBlocks, false, "BlocksValid", "every block is usable")
	}
	if len(rep.ConflictsWith) > 0 {
		set(mooringv1.ConditionConflicting, true, "OverlapsOlderPool", "overlaps older pool(s) "+strings.Join(rep.ConflictsWith, ", ")+
			": addresses in the overlap are handed out only by the older pool; remove the overlap from one of them")
	} else {
		set(mooringv1.ConditionConflicting, false, "NoOverlap", "no older pool overlaps this one")
	}
	ready, reason, msg := poolReadiness(p, rep, in)
	set(mooringv1.ConditionReady, ready, reason, msg)
	if subnets != nil {
		status, reason, msg := subnetCondition(in.pool, *subnets)
		meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: ConditionOutsideNodeSubnets, Status: status, Reason: reason,
			Message: truncate(msg, 32768), ObservedGeneration: p.Generation, LastTransitionTime: now})
	}
	return st
}

func poolReadiness(p *mooringv1.LoadBalancerIPPool, rep lbipam.PoolReport, in poolInput) (bool, string, string) {
	switch {
	case in.selectorError != "":
		return false, "InvalidSelector", in.selectorError
	case len(in.invalidBlocks)+len(rep.Invalid) > 0:
		// Not ready although valid blocks still hand out addresses: a block
		// the operator wrote is being ignored, and READY is where they look,
		// so its message carries each block's problem and fix.
		invalid := append(slices.Clone(in.invalidBlocks), rep.Invalid...)
		return false, mooringv1.ConditionInvalidBlocks, "some blocks cannot be used, and hand out nothing (the other blocks still do): " + strings.Join(invalid, "; ")
	case p.Spec.Disabled:
		return false, "Disabled", "the pool is disabled: Services keep the addresses they hold, nothing new is handed out; set spec.disabled=false to use it"
	case isZero(rep.IPv4) && isZero(rep.IPv6):
		return false, "NoUsableAddresses", "no block leaves an address to hand out: fix the blocks (see InvalidBlocks and Conflicting)"
	}
	return true, "Ready", "the pool hands out addresses"
}

func isZero(u lbipam.Usage) bool { return u.Total == nil || u.Total.Sign() == 0 }

func familyUsage(u lbipam.Usage) *mooringv1.FamilyUsage {
	if isZero(u) && (u.Used == nil || u.Used.Sign() == 0) {
		return nil
	}
	return &mooringv1.FamilyUsage{Total: u.Total.String(), Used: u.Used.String(), Free: u.Free.String()}
}
