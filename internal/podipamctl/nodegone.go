package podipamctl

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipam"
)

// A deleted Node's blocks are released only when no pod has an address
// from them any more: `kubectl delete node` while its pods still run (and
// the kubelet re-registering the Node a moment later) must not hand those
// addresses to another node. Pods are read straight from the API server,
// only for a deleted node's name.
// +kubebuilder:rbac:roleName=mooring-controller-pod-ipam,groups="",resources=pods,verbs=list

// retainRecheck is how often a deleted node's pods are looked at again.
const retainRecheck = 10 * time.Second

// nodeGone handles a Node that no longer exists. Its record and blocks
// stay while pods on it still have (or may be getting) addresses from its
// blocks, and at most DeletedNodeGrace when that is set; the record's
// NodeDeleted condition says so. Then the blocks are released and the
// record deleted. A Node re-created under the same name meanwhile keeps
// them (nodeIsBack).
func (r *nodeReconciler) nodeGone(ctx context.Context, name string) (reconcile.Result, error) {
	var rec mooringv1.PodIPAMNode
	err := r.c.Get(ctx, client.ObjectKey{Name: name}, &rec)
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	r.st.mu.Lock()
	blocks := r.st.alloc.Blocks(name)
	r.st.mu.Unlock()
	if len(blocks) > 0 && err == nil {
		wait, err := r.retain(ctx, &rec, blocks)
		if err != nil || wait > 0 {
			return reconcile.Result{RequeueAfter: wait}, err
		}
	}
	return reconcile.Result{}, r.release(ctx, name)
}

// nodeExists asks the API server (not the cache) whether the Node exists:
// a list by name, the verb the controller's role already has.
func (r *nodeReconciler) nodeExists(ctx context.Context, name string) (bool, error) {
	var nodes metav1.PartialObjectMetadataList
	nodes.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("NodeList"))
	if err := r.api.List(ctx, &nodes, client.MatchingFields{"metadata.name": name}, client.Limit(1)); err != nil {
		return false, fmt.Errorf("is node %s gone: %w", name, err)
	}
	return len(nodes.Items) > 0, nil
}

// retain returns how long to wait before looking again while the blocks
// must stay, or 0 when they may go.
func (r *nodeReconciler) retain(ctx context.Context, rec *mooringv1.PodIPAMNode, blocks []podipam.Block) (time.Duration, error) {
	users, err := r.podsUsing(ctx, rec.Name, blocks)
	if err != nil {
		return 0, fmt.Errorf("pods of deleted node %s: %w", rec.Name, err)
	}
	since := time.Now()
	if c := meta.FindStatusCondition(rec.Status.Conditions, mooringv1.ConditionNodeDeleted); c != nil && c.Status == metav1.ConditionTrue {
		since = c.LastTransitionTime.Time
	}
	grace := r.st.cfg.DeletedNodeGrace
	left := retainRecheck
	if grace > 0 {
		left = min(left, time.Until(since.Add(grace)))
	}
	if len(users) == 0 || left <= 0 {
		r.log.Info("node deleted: releasing its pod address blocks", "node", rec.Name, "blocks", len(blocks), "podsStillUsingThem", len(users))
		return 0, nil
	}
	msg := fmt.Sprintf("Node %s was deleted; its pod address blocks %s stay reserved for it while its pods still have addresses from them (%s): they are released once those pods are gone", rec.Name, prefixes(blocks), firstOf(users))
	if grace > 0 {
		msg += fmt.Sprintf(", at the latest at %s (--pod-ipam-deleted-node-grace)", since.Add(grace).UTC().Format(time.RFC3339))
	}
	want := rec.DeepCopy()
	meta.SetStatusCondition(&want.Status.Conditions, metav1.Condition{Type: mooringv1.ConditionNodeDeleted, Status: metav1.ConditionTrue,
		Reason: "BlocksRetained", Message: truncate(msg, 1024), ObservedGeneration: rec.Generation, LastTransitionTime: metav1.NewTime(since)})
	if c := meta.FindStatusCondition(rec.Status.Conditions, mooringv1.ConditionNodeDeleted); c == nil || c.Status != metav1.ConditionTrue {
		if err := r.c.Status().Update(ctx, want); err != nil && !apierrors.IsConflict(err) {
			return 0, fmt.Errorf("write NodeDeleted on %s: %w", rec.Name, err)
		}
		r.log.Info("node deleted: keeping its pod address blocks while its pods use them", "node", rec.Name, "pods", len(users))
	}
	return left, nil
}

// podsUsing lists the deleted node's pods that hold an address from its
// blocks, or that are not finished and have no address yet (an ADD may be
// under way on the node, which keeps serving from its record).
func (r *nodeReconciler) podsUsing(ctx context.Context, node string, blocks []podipam.Block) ([]string, error) {
	var pods corev1.PodList
	if err := r.api.List(ctx, &pods, client.MatchingFields{"spec.nodeName": node}); err != nil {
		return nil, err
	}
	var out []string
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		using := len(p.Status.PodIPs) == 0 && !p.Spec.HostNetwork
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			using = using || err == nil && slices.ContainsFunc(blocks, func(b podipam.Block) bool { return b.Prefix.Contains(a.Unmap()) })
		}
		if using {
			out = append(out, p.Namespace+"/"+p.Name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// release frees a deleted Node's blocks and deletes its record.
func (r *nodeReconciler) release(ctx context.Context, name string) error {
	r.st.mu.Lock()
	gone := r.st.alloc.ReleaseNode(name)
	r.st.mu.Unlock()
	r.st.forget(name)
	if len(gone) > 0 {
		r.log.Info("node deleted: released its pod address blocks", "node", name, "blocks", len(gone))
	}
	rec := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if err := r.c.Delete(ctx, rec); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete PodIPAMNode %s: %w", name, err)
	}
	return nil
}

// nodeIsBack clears NodeDeleted when the Node exists again (re-registered
// under the same name): it keeps its blocks, as if never gone.
func nodeIsBack(rec *mooringv1.PodIPAMNode) {
	if c := meta.FindStatusCondition(rec.Status.Conditions, mooringv1.ConditionNodeDeleted); c != nil && c.Status == metav1.ConditionTrue {
		meta.SetStatusCondition(&rec.Status.Conditions, metav1.Condition{Type: mooringv1.ConditionNodeDeleted, Status: metav1.ConditionFalse,
			Reason: "NodeExists", Message: "the Node exists again and keeps its blocks", ObservedGeneration: rec.Generation})
	}
}

// disown drops a Node owner reference from the record (agents before this
// version set one): with it, the garbage collector deletes the record with
// its Node, and the blocks with it, while pods may still use them. One
// write per such record, once.
func (r *nodeReconciler) disown(ctx context.Context, rec *mooringv1.PodIPAMNode) error {
	if !slices.ContainsFunc(rec.OwnerReferences, func(o metav1.OwnerReference) bool { return o.Kind == "Node" }) {
		return nil
	}
	patch := client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"ownerReferences":null}}`))
	if err := r.c.Patch(ctx, rec, patch); err != nil {
		return fmt.Errorf("drop the Node owner reference of PodIPAMNode %s: %w", rec.Name, err)
	}
	return nil
}

func prefixes(bs []podipam.Block) string {
	out := make([]string, 0, len(bs))
	for _, b := range bs {
		out = append(out, b.Prefix.String())
	}
	return strings.Join(out, ", ")
}

func firstOf(pods []string) string {
	if len(pods) == 1 {
		return "pod " + pods[0]
	}
	return fmt.Sprintf("%d pods, e.g. %s", len(pods), pods[0])
}
