package controller

import (
	"context"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/mooringlb/mooring/internal/lbipam"
)

// cacheLagRetry is how soon a Service whose cached copy predates our own
// write is looked at again; the watch usually catches up in milliseconds.
const cacheLagRetry = 50 * time.Millisecond

// serviceReconciler converges one Service: fetch, run the core, write the
// status once if it differs, emit an Event when the reason changed.
type serviceReconciler struct {
	c       client.Client
	st      *state
	rec     events.EventRecorder
	clock   clock.PassiveClock
	log     *slog.Logger
	classes classes
}

func (r *serviceReconciler) setup(mgr manager.Manager, workers int) error {
	return builder.ControllerManagedBy(mgr).
		Named("lbipam-services").
		For(&corev1.Service{}).
		Watches(&corev1.Namespace{}, handler.EnqueueRequestsFromMapFunc(r.servicesInNamespace),
			builder.WithPredicates(predicate.LabelChangedPredicate{})).
		WatchesRawSource(source.Channel(r.st.requeue, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: workers}).
		Complete(r)
}

// servicesInNamespace re-enqueues a namespace's Services when its labels
// change, since pools select by namespace labels.
func (r *serviceReconciler) servicesInNamespace(ctx context.Context, ns client.Object) []reconcile.Request {
	var list corev1.ServiceList
	if err := r.c.List(ctx, &list, client.InNamespace(ns.GetName())); err != nil {
		r.log.Error("list services of namespace", "namespace", ns.GetName(), "err", err)
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for i := range list.Items {
		if list.Items[i].Spec.Type == corev1.ServiceTypeLoadBalancer {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: ns.GetName(), Name: list.Items[i].Name}})
		}
	}
	return out
}

func (r *serviceReconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	if err := r.st.waitOpen(ctx); err != nil {
		return reconcile.Result{}, err
	}
	key := serviceKeyOf(req.NamespacedName)
	var svc corev1.Service
	if err := r.c.Get(ctx, req.NamespacedName, &svc); err != nil {
		if apierrors.IsNotFound(err) {
			r.st.release(key)
			return reconcile.Result{}, nil
		}
		return reconcile.Result{}, err
	}
	cl := classify(&svc, r.classes)
	switch cl {
	case notLoadBalancer:
		r.st.release(key)
		return reconcile.Result{}, nil
	case foreignClass:
		r.st.reserve(&svc)
		return reconcile.Result{}, nil
	}
	if r.st.cacheBehind(key, svc.ResourceVersion) {
		return reconcile.Result{RequeueAfter: cacheLagRetry}, nil
	}
	var ns corev1.Namespace
	if err := r.c.Get(ctx, types.NamespacedName{Name: svc.Namespace}, &ns); err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	in, invalid := toService(&svc, ns.Labels)
	if cl == adopted {
		r.st.adopt(in)
		return reconcile.Result{}, nil
	}
	res := r.st.assign(in, invalid != nil)
	err := r.write(ctx, &svc, res, invalid)
	if apierrors.IsConflict(err) {
		// Someone wrote the Service since our cached copy: an ordinary
		// race, not an error worth a log line. Look again once the cache
		// has the new version.
		return reconcile.Result{RequeueAfter: cacheLagRetry}, nil
	}
	return reconcile.Result{}, err
}

// write patches the status when it differs (one request carrying ingress
// and conditions), then emits the Events of the transitions.
func (r *serviceReconciler) write(ctx context.Context, svc *corev1.Service, res lbipam.Result, invalid error) error {
	desired, evs := desiredStatus(svc, res, invalid, metav1.NewTime(r.clock.Now()))
	if statusEqual(&svc.Status, &desired) {
		return nil
	}
	old := svc.DeepCopy()
	svc.Status = desired
	// The optimistic lock makes a write based on a stale copy fail instead
	// of overwriting an address or another component's condition.
	if err := r.c.Status().Patch(ctx, svc, client.MergeFromWithOptions(old, client.MergeFromWithOptimisticLock{})); err != nil {
		if apierrors.IsNotFound(err) || ctx.Err() != nil {
			return nil // gone, or we are shutting down: the next leader redoes it
		}
		return err
	}
	r.st.wrote(serviceKey(svc), old.ResourceVersion)
	for _, e := range evs {
		typ := corev1.EventTypeNormal
		if e.warning {
			typ = corev1.EventTypeWarning
		}
		r.rec.Eventf(svc, nil, typ, e.reason, e.action, "%s", e.note)
	}
	r.log.Debug("service status written", "service", serviceKey(svc).String(), "addresses", len(res.Addrs), "pending", len(res.Pending))
	return nil
}

func serviceKeyOf(n types.NamespacedName) lbipam.ServiceKey {
	return lbipam.ServiceKey{Namespace: n.Namespace, Name: n.Name}
}
