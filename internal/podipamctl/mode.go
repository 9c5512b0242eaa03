package podipamctl

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Mode is the cluster's pod IPAM mode.
type Mode string

const (
	ModeOff         Mode = "off"
	ModeKubernetes  Mode = "kubernetes"
	ModeClusterPool Mode = "cluster-pool"
	ModeMultiPool   Mode = "multi-pool"
)

// ParseMode validates a --pod-ipam-mode value.
func ParseMode(s string) (Mode, error) {
	switch m := Mode(s); m {
	case ModeOff, ModeKubernetes, ModeClusterPool, ModeMultiPool:
		return m, nil
	case "":
		return ModeOff, nil
	}
	return "", fmt.Errorf("--pod-ipam-mode %q: use off, kubernetes, cluster-pool or multi-pool", s)
}

// ModeConfigMap is the ConfigMap (in the controller's namespace) that
// records the cluster's mode at first start.
const (
	ModeConfigMap = "mooring-pod-ipam-mode"
	modeKey       = "mode"
	previousKey   = "previous"
)

// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups="",namespace=mooring-system,resources=configmaps,verbs=get;create;update
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups=events.k8s.io,resources=events,verbs=create

// LockMode compares the mode this component was started with against the
// one recorded in the cluster, records it on first start, and returns an
// error (after emitting an Event on the ConfigMap) when they differ in a
// way that is not supported. Call it before leader election: a replica
// started with the wrong mode must not even wait for the lease.
//
// A first start with off records nothing, so enabling pod IPAM later is a
// first start. The only supported change is cluster-pool → multi-pool.
func LockMode(ctx context.Context, c client.Client, namespace string, mode Mode, component string) error {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ModeConfigMap}, &cm)
	switch {
	case apierrors.IsNotFound(err):
		if mode == ModeOff {
			return nil
		}
		cm = corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ModeConfigMap},
			Data: map[string]string{modeKey: string(mode)}}
		if err := c.Create(ctx, &cm); err != nil {
			return fmt.Errorf("record pod IPAM mode %q in ConfigMap %s/%s: %w", mode, namespace, ModeConfigMap, err)
		}
		return nil
	case apierrors.IsForbidden(err) && mode == ModeOff:
		return nil // an LB-only install without the pod IPAM role
	case err != nil:
		return fmt.Errorf("read the recorded pod IPAM mode (ConfigMap %s/%s): %w", namespace, ModeConfigMap, err)
	}
	recorded := Mode(cm.Data[modeKey])
	if recorded == mode || recorded == "" && mode == ModeOff {
		return nil
	}
	if recorded == ModeClusterPool && mode == ModeMultiPool {
		cm.Data[modeKey], cm.Data[previousKey] = string(mode), string(recorded)
		if err := c.Update(ctx, &cm); err != nil {
			return fmt.Errorf("record the migration cluster-pool → multi-pool: %w", err)
		}
		return nil
	}
	msg := RefusalMessage(recorded, mode)
	emitRefusal(ctx, c, &cm, component, msg)
	return fmt.Errorf("%s", msg)
}

// RefusalMessage says what a mode change would break and what to do.
func RefusalMessage(recorded, wanted Mode) string {
	why := "every node would keep allocating from the blocks of the old mode while the cluster's records say otherwise"
	switch {
	case wanted == ModeOff:
		why = "no new node would get a pod address block and released blocks would never be reused"
	case recorded == ModeKubernetes:
		why = "Mooring would cut blocks that overlap the node.spec.podCIDRs kube-controller-manager already handed out, so two pods could get one address"
	case wanted == ModeKubernetes:
		why = "running pods hold addresses from Mooring's blocks, which node.spec.podCIDRs do not match, so new pods could get addresses already in use"
	case recorded == ModeMultiPool && wanted == ModeClusterPool:
		why = "nodes hold blocks of several pools and per-namespace pools would silently stop applying"
	}
	return fmt.Sprintf("pod IPAM mode is %q in this cluster (ConfigMap %s), but this component was started with --pod-ipam-mode=%s: refusing to start, because %s. "+
		"Start it with --pod-ipam-mode=%s. The only supported change is cluster-pool → multi-pool (each node's block becomes its first block of the pool %q)",
		recorded, ModeConfigMap, wanted, why, recorded, "default")
}

func emitRefusal(ctx context.Context, c client.Client, cm *corev1.ConfigMap, component, msg string) {
	now := metav1.NewMicroTime(time.Now())
	ev := &eventsv1.Event{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s.%x", ModeConfigMap, now.UnixNano()), Namespace: cm.Namespace},
		EventTime:  now, Type: corev1.EventTypeWarning, Reason: "PodIPAMModeMismatch", Action: "Start",
		ReportingController: "mooring.dev/" + component, ReportingInstance: component,
		Regarding: corev1.ObjectReference{Kind: "ConfigMap", APIVersion: "v1", Namespace: cm.Namespace, Name: cm.Name, UID: cm.UID},
		Note:      truncate(msg, 1024),
	}
	_ = c.Create(ctx, ev) // best effort: the exit message says the same
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

// RecordedMode reads the cluster's mode (agents learn it from here, not
// from their own flags). No record means off.
func RecordedMode(ctx context.Context, c client.Reader, namespace string) (Mode, error) {
	var cm corev1.ConfigMap
	err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: ModeConfigMap}, &cm)
	if apierrors.IsNotFound(err) {
		return ModeOff, nil
	}
	if err != nil {
		return "", fmt.Errorf("read the pod IPAM mode (ConfigMap %s/%s): %w", namespace, ModeConfigMap, err)
	}
	return ParseMode(cm.Data[modeKey])
}
