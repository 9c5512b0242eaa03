package podipamctl

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/ipamd"
)

// Defaults of the reconciliation against the API's pods (docs/podipam.md,
// "What stays leaked"): the node's pods are listed every interval, and an
// allocation held at least the minimum age whose pod two lists an
// interval apart miss is freed.
const (
	DefaultReconcileInterval = 5 * time.Minute
	DefaultReconcileMinAge   = 5 * time.Minute
)

// reconcileTimeout bounds one pass's two reads.
const reconcileTimeout = 30 * time.Second

// NodeMetrics are the node side's metrics, built once per agent process
// (the node side restarts within it when the API server was unreachable).
type NodeMetrics struct {
	reconciled prometheus.Counter
}

// NewNodeMetrics registers the node side's metrics on reg (nil: not
// registered).
func NewNodeMetrics(reg prometheus.Registerer) *NodeMetrics {
	return &NodeMetrics{reconciled: promauto.With(reg).NewCounter(prometheus.CounterOpts{
		Name: "mooring_agent_pod_ipam_reconciled_addresses_total",
		Help: "Pod addresses this agent freed because their pod had left the API without a CNI DEL (reconciliation against the node's pods).",
	})}
}

// reconcile frees leaked allocations (ipamd.Reconcile decides) once per
// ReconcileInterval. The allocations are read before the pods are listed,
// so every one of them had its pod bound before the list began: a pod the
// list misses has left the API since. It writes nothing to the API.
func (n *nodeSide) reconcile(ctx context.Context, now time.Time) {
	iv := n.cfg.ReconcileInterval
	if iv <= 0 || (!n.lastReconcile.IsZero() && now.Sub(n.lastReconcile) < iv) {
		return
	}
	n.lastReconcile = now
	held := n.alloc.Held()
	ctx, cancel := context.WithTimeout(ctx, reconcileTimeout)
	defer cancel()
	view, err := n.podView(ctx, now)
	if err != nil {
		// A failed read is no evidence: nothing is freed, and what earlier
		// lists missed is kept (ipamd.Reconcile with a nil view).
		n.cfg.Log.Warn("pod IPAM reconciliation skipped: the node's pods could not be listed", "err", err)
		view = nil
	}
	pol := ipamd.ReconcilePolicy{Node: n.cfg.NodeName, MinAge: n.cfg.ReconcileMinAge, Gap: iv}
	free, next := ipamd.Reconcile(pol, held, view, n.missing)
	n.missing = next
	if len(free) == 0 {
		return
	}
	freed, err := n.alloc.Release(free)
	if err != nil {
		n.cfg.Log.Warn("pod IPAM reconciliation: freeing leaked addresses failed; retrying at the next pass", "err", err)
		return
	}
	since := map[ipamd.Key]time.Time{}
	for _, h := range free {
		since[h.Key] = h.Since
	}
	for _, al := range freed {
		addrs := make([]string, 0, len(al.IPs))
		for _, ip := range al.IPs {
			addrs = append(addrs, ip.Address.Addr().String())
		}
		n.cfg.Log.Info("pod IPAM: freed the addresses of a pod that left the API without a CNI DEL",
			"namespace", al.Namespace, "pod", al.Pod, "podUID", al.PodUID, "network", al.Network,
			"container", al.ContainerID, "interface", al.IfName, "addresses", addrs, "heldSince", since[al.Key])
		if n.cfg.Metrics != nil {
			n.cfg.Metrics.reconciled.Add(float64(len(al.IPs)))
		}
	}
}

// podView lists this node's pods straight from the API server (a
// consistent read, not a cache that may have lost its watch), metadata
// only. A Node that does not exist makes no view: its pods may have been
// deleted with it while they still run (docs/podipam.md, node deletion).
func (n *nodeSide) podView(ctx context.Context, at time.Time) (*ipamd.PodView, error) {
	node := &metav1.PartialObjectMetadata{}
	node.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	if err := n.c.Get(ctx, client.ObjectKey{Name: n.cfg.NodeName}, node); err != nil {
		return nil, fmt.Errorf("read Node %s: %w", n.cfg.NodeName, err)
	}
	pods := &metav1.PartialObjectMetadataList{}
	pods.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := n.c.List(ctx, pods, client.MatchingFields{"spec.nodeName": n.cfg.NodeName}); err != nil {
		return nil, fmt.Errorf("list the pods of node %s: %w", n.cfg.NodeName, err)
	}
	return podViewOf(at, pods.Items), nil
}

// podViewOf converts listed pods: each by its UID, and a mirror pod also
// by its static pod's (the UID the kubelet gives the runtime).
func podViewOf(at time.Time, pods []metav1.PartialObjectMetadata) *ipamd.PodView {
	v := &ipamd.PodView{At: at, Pods: make(map[ipamd.PodRef][]string, len(pods))}
	for _, p := range pods {
		ref := ipamd.PodRef{Namespace: p.Namespace, Name: p.Name}
		v.Pods[ref] = append(v.Pods[ref], string(p.UID))
		if m := p.Annotations[corev1.MirrorPodAnnotationKey]; m != "" {
			v.Pods[ref] = append(v.Pods[ref], m)
		}
	}
	return v
}
