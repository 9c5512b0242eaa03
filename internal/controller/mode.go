package controller

import (
	"context"
	"fmt"
	"maps"
	"os"
	"strconv"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
)

// Annotations the leading replica sets on its leader-election Lease, so that
// tools (`mooring migrate metallb run`) can tell how the controller that
// writes runs without scraping its metrics: the Lease is the one object
// that belongs to the leader, and its holderIdentity and renewTime say
// which replica wrote them and that it is alive.
const (
	AnnotationAdoptOnly    = "mooring.dev/adopt-only"
	AnnotationDefaultClass = "mooring.dev/default-class"
)

// defaultRenewDeadline is controller-runtime's, used to bound the lock's
// requests when Config.RenewDeadline is zero.
const defaultRenewDeadline = 10 * time.Second

// leaseLock is the leader-election lock: client-go's LeaseLock whose
// client adds the mode annotations to every Create and Update it sends. The
// replica that takes the Lease thus writes its holderIdentity and its mode
// in one request, and every renewal carries them again (an annotation
// someone removed is back within a RetryPeriod): no request of its own and
// no polling. It mirrors what controller-runtime's default lock does (the
// identity, the user agent, a request timeout of half the renew deadline,
// the "became leader" Events, which go to rec once the manager exists).
func leaseLock(cfg *Config, rec *lateRecorder) (resourcelock.Interface, error) {
	host, err := os.Hostname()
	if err != nil {
		return nil, fmt.Errorf("controller: leader identity: %w", err)
	}
	rc := rest.AddUserAgent(rest.CopyConfig(cfg.REST), "leader-election")
	renew := cfg.RenewDeadline
	if renew == 0 {
		renew = defaultRenewDeadline
	}
	rc.Timeout = max(renew/2, time.Second)
	leases, err := coordinationv1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("controller: leader election client: %w", err)
	}
	return &resourcelock.LeaseLock{
		LeaseMeta: metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: cfg.LeaseName},
		Client:    annotatedLeases{LeasesGetter: leases, ann: modeAnnotations(cfg)},
		LockConfig: resourcelock.ResourceLockConfig{
			Identity:      host + "_" + string(uuid.NewUUID()),
			EventRecorder: rec,
		},
	}, nil
}

func modeAnnotations(cfg *Config) map[string]string {
	return map[string]string{
		AnnotationAdoptOnly:    strconv.FormatBool(cfg.AdoptOnly),
		AnnotationDefaultClass: strconv.FormatBool(cfg.DefaultClass),
	}
}

// annotatedLeases hands out Lease clients that set ann on what they create
// and update; everything else goes through unchanged.
type annotatedLeases struct {
	coordinationv1client.LeasesGetter
	ann map[string]string
}

func (a annotatedLeases) Leases(ns string) coordinationv1client.LeaseInterface {
	return annotatedLeaseClient{LeaseInterface: a.LeasesGetter.Leases(ns), ann: a.ann}
}

type annotatedLeaseClient struct {
	coordinationv1client.LeaseInterface
	ann map[string]string
}

func (c annotatedLeaseClient) Create(ctx context.Context, l *coordinationv1.Lease, o metav1.CreateOptions) (*coordinationv1.Lease, error) {
	return c.LeaseInterface.Create(ctx, c.annotate(l), o)
}

func (c annotatedLeaseClient) Update(ctx context.Context, l *coordinationv1.Lease, o metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	return c.LeaseInterface.Update(ctx, c.annotate(l), o)
}

// annotate returns a copy of l with the annotations set: the lock keeps
// its object, and changing it behind its back would be a surprise.
func (c annotatedLeaseClient) annotate(l *coordinationv1.Lease) *coordinationv1.Lease {
	l = l.DeepCopy()
	if l.Annotations == nil {
		l.Annotations = make(map[string]string, len(c.ann))
	}
	maps.Copy(l.Annotations, c.ann)
	return l
}

// lateRecorder passes leader election's Events to a recorder set once the
// manager (which owns the Event broadcaster) exists; earlier ones are
// dropped, as none is emitted before the manager starts.
type lateRecorder struct {
	mu  sync.Mutex
	rec record.EventRecorder
}

func (r *lateRecorder) set(rec record.EventRecorder) {
	r.mu.Lock()
	r.rec = rec
	r.mu.Unlock()
}

func (r *lateRecorder) Eventf(obj runtime.Object, eventType, reason, message string, args ...any) {
	r.mu.Lock()
	rec := r.rec
	r.mu.Unlock()
	if rec != nil {
		rec.Eventf(obj, eventType, reason, message, args...)
	}
}
