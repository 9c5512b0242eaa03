package podipamctl

import (
	"context"
	"errors"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/kube"
)

// The agent's pod-IPAM side puts a pool error on the pod itself, with the
// agent's own role (the controller's role holds the same rule for its
// Events on pools and nodes).
// +kubebuilder:rbac:roleName=mooring-agent-pod-ipam,groups=events.k8s.io,resources=events,verbs=create;patch

// AgentEventReporter is the reporting controller of the Events the node
// side writes.
const AgentEventReporter = "mooring-pod-ipam-agent"

// Reasons of the Events on a pod whose ADD failed for its pool.
const (
	ReasonPoolNotFound  = "PodIPPoolNotFound"
	ReasonPoolExhausted = "PodIPPoolExhausted"
	ReasonPoolUnknown   = "PodIPPoolUnavailable"
)

// podEvents tells a pod why it gets no address when the reason is its
// pool: the CNI error otherwise reaches only the kubelet's log, and the pod
// sits in ContainerCreating saying nothing. Repeats (the kubelet retries
// the ADD) become one Event series: client-go's events library writes the
// first, counts the rest and updates the series at most every 30 minutes.
type podEvents struct {
	b   events.EventBroadcaster
	rec events.EventRecorder
	c   client.Reader
	log *slog.Logger
}

func newPodEvents(cs kubernetes.Interface, c client.Reader, log *slog.Logger) *podEvents {
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: cs.EventsV1()})
	return &podEvents{b: b, rec: b.NewRecorder(kube.Scheme(), AgentEventReporter), c: c, log: log}
}

// start begins writing Events until ctx ends or the returned stop is
// called (which waits for nothing: the library's goroutines end with ctx).
func (e *podEvents) start(ctx context.Context) func() {
	if err := e.b.StartRecordingToSinkWithContext(ctx); err != nil {
		e.log.Warn("pod IPAM: Events on pods are off", "err", err)
	}
	return e.b.Shutdown
}

// addFailed is ipamd.Server.AddFailed: an Event on the pod for errors of
// its pool; nothing for a pool that simply has no block on this node yet
// (the agent asked for one; the retry succeeds), or for a bare CNI call.
func (e *podEvents) addFailed(req ipamd.AddRequest, err error) {
	reason := poolReason(err)
	if reason == "" || req.Pod == "" {
		return
	}
	pod := &corev1.Pod{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if e.c.Get(ctx, client.ObjectKey{Namespace: req.Namespace, Name: req.Pod}, pod) != nil {
		// Not in the cache: an Event without the UID still shows in
		// `kubectl get events`, and names the pod.
		pod = &corev1.Pod{}
		pod.Namespace, pod.Name = req.Namespace, req.Pod
	}
	pod.Kind, pod.APIVersion = "Pod", "v1"
	e.rec.Eventf(pod, nil, corev1.EventTypeWarning, reason, "AllocatePodIP", "%s", truncate(err.Error(), 1000))
}

// poolReason names the Event for an ADD error caused by the pod's pool, or
// "".
func poolReason(err error) string {
	switch {
	case errors.Is(err, ipamd.ErrNoPool):
		return ReasonPoolNotFound
	case errors.Is(err, ipamd.ErrPoolExhausted):
		return ReasonPoolExhausted
	case errors.Is(err, ipamd.ErrUnavailable):
		return ReasonPoolUnknown
	}
	return ""
}
