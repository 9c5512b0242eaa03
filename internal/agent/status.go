package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// apiTimeout bounds every write: with the API server unreachable, writes
// fail fast and are retried later, while announcing goes on regardless.
const apiTimeout = 5 * time.Second

// maxBackoff caps the retry interval of failed status writes;
// conflictRetry is the pause after an optimistic-concurrency conflict, long
// enough for the cache to see the other writer's change.
const (
	maxBackoff    = 30 * time.Second
	conflictRetry = 200 * time.Millisecond
)

// recorder writes Events on Services. Events are best effort: a failure is
// logged and counted, never retried.
type recorder struct {
	c     client.Client
	clock clock.Clock
	node  string
	log   *slog.Logger
	met   *metrics
}

func (r *recorder) record(ctx context.Context, svc *corev1.Service, ev event) {
	r.recordOn(ctx, &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace,
		Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion}, ev, svc.Namespace)
}

// recordOn records ev on the object ref points to, in namespace (the
// object's own; "default" for cluster-scoped objects, as the kubelet does).
func (r *recorder) recordOn(ctx context.Context, ref *corev1.ObjectReference, ev event, namespace string) {
	now := metav1.NewTime(r.clock.Now())
	obj := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".", Namespace: namespace},
		InvolvedObject: *ref,
		Reason:         ev.reason, Message: ev.message, Type: ev.typ,
		Source:         corev1.EventSource{Component: "mooring-agent", Host: r.node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "mooring.dev/agent", ReportingInstance: r.node,
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	err := r.c.Create(ctx, obj)
	r.met.write("event", err)
	if err != nil {
		r.log.Warn("recording event failed", "object", ref.Kind+" "+namespace+"/"+ref.Name, "reason", ev.reason, "err", err)
	}
}

// statusWriter makes the visible state (Service annotations, policy
// conditions) match the latest decision. It is level-triggered against the
// informer cache, so it writes only on a difference and catches up after an
// API outage with no replay of intermediate states.
type statusWriter struct {
	reader client.Reader
	c      client.Client
	rec    *recorder
	clock  clock.WithTicker
	node   string
	log    *slog.Logger
	met    *metrics
	in     *mailbox[announce.Result]
	// patched remembers the resourceVersion an object had when we patched
	// it, to skip re-patching until the cache has caught up with our write
	// (the precondition would only make the second patch fail).
	patched map[string]string
}

func (w *statusWriter) run(ctx context.Context) error {
	var retry <-chan time.Time
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.in.ready():
		case <-retry:
		}
		res, ok := w.in.get()
		if !ok {
			continue
		}
		if err := w.sync(ctx, res); err != nil {
			if apierrors.IsConflict(err) {
				// Another owner patched the same Service (dual-stack
				// addresses with different owners): re-read and retry soon.
				w.log.Debug("status write conflict; retrying", "err", err)
				retry = w.clock.After(conflictRetry)
				continue
			}
			backoff = min(max(2*backoff, time.Second), maxBackoff)
			w.log.Warn("updating announcement status failed; will retry", "in", backoff, "err", err)
			retry = w.clock.After(backoff)
			continue
		}
		backoff, retry = 0, nil
	}
}

func (w *statusWriter) sync(ctx context.Context, res announce.Result) error {
	var svcs corev1.ServiceList
	if err := w.reader.List(ctx, &svcs, client.UnsafeDisableDeepCopy); err != nil {
		return fmt.Errorf("listing Services from the cache: %w", err)
	}
	w.forgetCaughtUp(svcs.Items)
	var firstErr error
	for _, p := range planAnnotations(res, w.node, svcs.Items) {
		key := types.NamespacedName{Namespace: p.svc.Namespace, Name: p.svc.Name}
		if w.patched["svc/"+key.String()] == p.svc.ResourceVersion {
			continue // our patch has not reached the cache yet
		}
		err := w.patchAnnotation(ctx, p)
		w.met.write("annotation", err)
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("annotating Service %s: %w", key, err))
			continue
		}
		w.patched["svc/"+key.String()] = p.svc.ResourceVersion
		for _, ev := range p.events {
			w.log.Info("announcement moved", "service", key.String(), "message", ev.message)
			w.rec.record(ctx, p.svc, ev)
		}
	}
	if res.StatusWriter == w.node {
		firstErr = cmpErr(firstErr, w.syncPolicies(ctx, res))
	}
	return firstErr
}

// forgetCaughtUp drops the memory of Service patches the cache has caught
// up with (or whose Service is gone), so the map stays small.
func (w *statusWriter) forgetCaughtUp(svcs []corev1.Service) {
	rv := make(map[string]string, len(svcs))
	for i := range svcs {
		rv["svc/"+svcs[i].Namespace+"/"+svcs[i].Name] = svcs[i].ResourceVersion
	}
	for k, v := range w.patched {
		if cur, ok := rv[k]; strings.HasPrefix(k, "svc/") && (!ok || cur != v) {
			delete(w.patched, k)
		}
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// patchAnnotation is a merge patch with the cached resourceVersion as a
// precondition: a concurrent writer (another owner of another address of
// the same Service) makes it fail with a conflict, and the retry re-reads.
func (w *statusWriter) patchAnnotation(ctx context.Context, p annotationPlan) error {
	var value any = p.value
	if p.value == "" {
		value = nil
	}
	body, err := json.Marshal(map[string]any{"metadata": map[string]any{
		"resourceVersion": p.svc.ResourceVersion,
		"annotations":     map[string]any{mooringv1.AnnotationAnnouncedBy: value},
	}})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, apiTimeout)
	defer cancel()
	obj := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: p.svc.Namespace, Name: p.svc.Name}}
	return w.c.Patch(ctx, obj, client.RawPatch(types.MergePatchType, body))
}

func (w *statusWriter) syncPolicies(ctx context.Context, res announce.Result) error {
	var pols mooringv1.L2AnnouncementPolicyList
	if err := w.reader.List(ctx, &pols); err != nil {
		return fmt.Errorf("listing L2AnnouncementPolicies from the cache: %w", err)
	}
	var firstErr error
	for _, p := range planPolicyStatus(res, pols.Items, metav1.NewTime(w.clock.Now())) {
		if w.patched["policy/"+p.policy.Name] == p.policy.ResourceVersion {
			continue
		}
		body, err := json.Marshal(map[string]any{
			"metadata": map[string]any{"resourceVersion": p.policy.ResourceVersion},
			"status":   map[string]any{"conditions": p.conditions, "observedGeneration": p.policy.Generation},
		})
		if err != nil {
			return err
		}
		pctx, cancel := context.WithTimeout(ctx, apiTimeout)
		obj := &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.policy.Name}}
		err = w.c.Status().Patch(pctx, obj, client.RawPatch(types.MergePatchType, body))
		cancel()
		w.met.write("policy_status", err)
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("updating the status of L2AnnouncementPolicy %s: %w", p.policy.Name, err))
			continue
		}
		w.patched["policy/"+p.policy.Name] = p.policy.ResourceVersion
	}
	return firstErr
}
