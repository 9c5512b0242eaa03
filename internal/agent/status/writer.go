package status

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/clock"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/mailbox"
	"github.com/mooringlb/mooring/internal/announce"
)

// APITimeout bounds every write: with the API server unreachable, writes
// fail fast and are retried later, while announcing goes on regardless.
const APITimeout = 5 * time.Second

// maxBackoff caps the retry interval of failed status writes;
// conflictRetry is the pause after an optimistic-concurrency conflict, long
// enough for the cache to see the other writer's change.
const (
	maxBackoff    = 30 * time.Second
	conflictRetry = 200 * time.Millisecond
)

// Writes counts the agent's writes to the API server by kind and result
// (mooring_agent_api_writes_total): every write of every room is counted
// here, so a test can prove a path writes nothing.
type Writes struct{ vec *prometheus.CounterVec }

// NewWrites builds the counter on reg (nil: unregistered).
func NewWrites(reg prometheus.Registerer) *Writes {
	return &Writes{vec: promauto.With(reg).NewCounterVec(prometheus.CounterOpts{
		Name: "mooring_agent_api_writes_total",
		Help: "Writes to the API server by kind (announcer, event, policy_status, pod_status) and result; nothing periodic.",
	}, []string{"kind", "result"})}
}

// Count counts one write of kind that returned err.
func (w *Writes) Count(kind string, err error) {
	res := "ok"
	if err != nil {
		res = "error"
	}
	w.vec.WithLabelValues(kind, res).Inc()
}

// Counter is the counter of kind and result (tests).
func (w *Writes) Counter(kind, result string) prometheus.Counter {
	return w.vec.WithLabelValues(kind, result)
}

// Recorder writes Events. Events are best effort: a failure is logged and
// counted, never retried.
type Recorder struct {
	C      client.Client
	Clock  clock.Clock
	Node   string
	Log    *slog.Logger
	Writes *Writes
}

// Record records ev on a Service.
func (r *Recorder) Record(ctx context.Context, svc *corev1.Service, ev Event) {
	r.RecordOn(ctx, &corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace,
		Name: svc.Name, UID: svc.UID, ResourceVersion: svc.ResourceVersion}, ev, svc.Namespace)
}

// RecordOn records ev on the object ref points to, in namespace (the
// object's own; "default" for cluster-scoped objects, as the kubelet does).
func (r *Recorder) RecordOn(ctx context.Context, ref *corev1.ObjectReference, ev Event, namespace string) {
	now := metav1.NewTime(r.Clock.Now())
	obj := &corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{GenerateName: ref.Name + ".", Namespace: namespace},
		InvolvedObject: *ref,
		Reason:         ev.Reason, Message: ev.Message, Type: ev.Type,
		Source:         corev1.EventSource{Component: "mooring-agent", Host: r.Node},
		FirstTimestamp: now, LastTimestamp: now, Count: 1,
		ReportingController: "mooring.dev/agent", ReportingInstance: r.Node,
	}
	ctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	err := r.C.Create(ctx, obj)
	r.Writes.Count("event", err)
	if err != nil {
		r.Log.Warn("recording event failed", "object", ref.Kind+" "+namespace+"/"+ref.Name, "reason", ev.Reason, "err", err)
	}
}

// Writer makes the visible state (this node's L2Announcer, policy
// conditions, Events) match the latest decision. It writes only on a
// difference and catches up after an API outage with no replay of
// intermediate states. It never writes a Service.
type Writer struct {
	reader client.Reader // informer cache
	c      client.Client // direct: the L2Announcer is read and written here only
	rec    *Recorder
	clock  clock.WithTicker
	node   string
	log    *slog.Logger
	writes *Writes
	in     *mailbox.Box[Decision]
	events *EventQueue
	// written is the L2Announcer status last written, to write on change
	// only; nil before the first write.
	written *mooringv1.L2AnnouncerStatus
	// patched remembers the resourceVersion a policy had when we patched
	// it, to skip re-patching until the cache has caught up with our write
	// (the precondition would only make the second patch fail).
	patched map[string]string
}

// NewWriter writes what in and events carry for node: reader is the
// informer cache, rec records the Events (and names the client).
func NewWriter(reader client.Reader, rec *Recorder, clk clock.WithTicker, in *mailbox.Box[Decision], events *EventQueue) *Writer {
	return &Writer{reader: reader, c: rec.C, rec: rec, clock: clk, node: rec.Node, log: rec.Log, writes: rec.Writes,
		in: in, events: events, patched: map[string]string{}}
}

// Run writes until ctx ends, retrying failed writes with a backoff.
func (w *Writer) Run(ctx context.Context) error {
	var retry <-chan time.Time
	backoff := time.Duration(0)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-w.in.Ready():
		case <-retry:
		}
		d, ok := w.in.Get()
		if !ok {
			continue
		}
		if err := w.Sync(ctx, d); err != nil {
			if apierrors.IsConflict(err) {
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

// Sync writes what d and the queued Events call for, once.
func (w *Writer) Sync(ctx context.Context, d Decision) error {
	firstErr := w.syncAnnouncer(ctx, announcerStatus(d, w.node))
	w.recordEvents(ctx)
	if d.Res.StatusWriter == w.node {
		firstErr = cmpErr(firstErr, w.syncPolicies(ctx, d.Res))
	}
	return firstErr
}

// syncAnnouncer writes this node's L2Announcer when its status changed:
// one read and one write, or a create the first time.
func (w *Writer) syncAnnouncer(ctx context.Context, st mooringv1.L2AnnouncerStatus) error {
	if w.written != nil && equality.Semantic.DeepEqual(*w.written, st) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, APITimeout)
	defer cancel()
	// Only once this node's Node exists: an agent with a wrong
	// --node-name must not leave an ownerless L2Announcer behind. The
	// decision after the Node appears is published at once (decide).
	var node corev1.Node
	if err := w.reader.Get(ctx, types.NamespacedName{Name: w.node}, &node); err != nil {
		if apierrors.IsNotFound(err) {
			return nil // w.written stays: written once the Node appears
		}
		return fmt.Errorf("reading Node %s from the cache: %w", w.node, err)
	}
	var obj mooringv1.L2Announcer
	err := w.c.Get(ctx, types.NamespacedName{Name: w.node}, &obj)
	if apierrors.IsNotFound(err) {
		// Deleted with its Node: a stale view must not outlive it.
		obj = mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: w.node, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID, BlockOwnerDeletion: ptr.To(false)}}}}
		err = w.c.Create(ctx, &obj)
		w.writes.Count("announcer", err)
	}
	if err != nil {
		return fmt.Errorf("reading or creating L2Announcer %s: %w", w.node, err)
	}
	// status.lost belongs to fast eviction (internal/agent/evict), which
	// writes it on its own: kept as read. The update carries the
	// resourceVersion read, so a concurrent change of it is a conflict
	// (retried), never overwritten.
	written := st
	st.Lost = obj.Status.Lost
	if equality.Semantic.DeepEqual(obj.Status, st) {
		w.written = &written
		return nil
	}
	obj.Status = st
	err = w.c.Status().Update(ctx, &obj)
	w.writes.Count("announcer", err)
	if err != nil {
		return fmt.Errorf("updating the status of L2Announcer %s: %w", w.node, err)
	}
	w.written = &written
	return nil
}

// recordEvents records the queued Events; they are best effort.
func (w *Writer) recordEvents(ctx context.Context) {
	evs, dropped := w.events.take()
	if dropped > 0 {
		w.log.Warn("too many announcement Events at once; the rest are in this node's L2Announcer status", "dropped", dropped)
	}
	for _, e := range evs {
		var svc corev1.Service
		if err := w.reader.Get(ctx, types.NamespacedName{Namespace: e.svc.Namespace, Name: e.svc.Name}, &svc); err != nil {
			continue // gone meanwhile
		}
		w.log.Info("announcement changed", "service", e.svc.String(), "message", e.ev.Message)
		w.rec.Record(ctx, &svc, e.ev)
	}
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

func (w *Writer) syncPolicies(ctx context.Context, res announce.Result) error {
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
		pctx, cancel := context.WithTimeout(ctx, APITimeout)
		obj := &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: p.policy.Name}}
		err = w.c.Status().Patch(pctx, obj, client.RawPatch(types.MergePatchType, body))
		cancel()
		w.writes.Count("policy_status", err)
		if err != nil {
			firstErr = cmpErr(firstErr, fmt.Errorf("updating the status of L2AnnouncementPolicy %s: %w", p.policy.Name, err))
			continue
		}
		w.patched["policy/"+p.policy.Name] = p.policy.ResourceVersion
	}
	return firstErr
}
