package cluster

import (
	"context"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// stopGracePeriod is the grace period the migration gives MetalLB's
// controller pods when it deletes them (stopController).
const stopGracePeriod int64 = 10

// stopController deletes MetalLB's controller Deployment dep so that its
// pods leave the API only once their containers have stopped.
//
// MetalLB's manifest sets terminationGracePeriodSeconds: 0, and a pod
// deleted with a grace period of 0 leaves the API at once while its
// kubelet stops the container a moment later: on the lab's real nodes the
// controller, still running when its IPAddressPools were deleted, took
// every address off the Services (docs/migration.md). So when the
// Deployment has pods, it and its ReplicaSets are deleted orphaning what
// they own, and the pods are deleted with stopGracePeriod: the kubelet
// removes such a pod from the API only after its containers have stopped.
// The garbage collector finishes the orphaning deletes. Without pods the
// Deployment is deleted as it is.
func (r *Runner) stopController(ctx context.Context, dep *appsv1.Deployment) error {
	ns := dep.Namespace
	sel, err := metav1.LabelSelectorAsSelector(dep.Spec.Selector)
	if err != nil {
		return err
	}
	list := metav1.ListOptions{LabelSelector: sel.String()}
	pods, err := r.CS.CoreV1().Pods(ns).List(ctx, list)
	if err != nil {
		return err
	}
	if len(pods.Items) == 0 {
		return ignoreNotFound(r.CS.AppsV1().Deployments(ns).Delete(ctx, dep.Name, metav1.DeleteOptions{}))
	}
	// The ReplicaSets are listed before the Deployment is deleted: the
	// garbage collector takes the Deployment's owner reference off them
	// at once, and one left would replace the pods deleted below.
	rss, err := r.CS.AppsV1().ReplicaSets(ns).List(ctx, list)
	if err != nil {
		return err
	}
	orphan := metav1.DeleteOptions{PropagationPolicy: new(metav1.DeletePropagationOrphan)}
	if err := ignoreNotFound(r.CS.AppsV1().Deployments(ns).Delete(ctx, dep.Name, orphan)); err != nil {
		return err
	}
	for _, rs := range rss.Items {
		if !ownedBy(rs.OwnerReferences, dep.UID) {
			continue
		}
		if err := ignoreNotFound(r.CS.AppsV1().ReplicaSets(ns).Delete(ctx, rs.Name, orphan)); err != nil {
			return fmt.Errorf("deleting ReplicaSet %s: %w", rs.Name, err)
		}
	}
	// Listed again: no ReplicaSet being deleted creates pods.
	if pods, err = r.CS.CoreV1().Pods(ns).List(ctx, list); err != nil {
		return err
	}
	grace := metav1.DeleteOptions{GracePeriodSeconds: new(stopGracePeriod)}
	for _, p := range pods.Items {
		if err := ignoreNotFound(r.CS.CoreV1().Pods(ns).Delete(ctx, p.Name, grace)); err != nil {
			return fmt.Errorf("deleting pod %s: %w", p.Name, err)
		}
	}
	return nil
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, o := range refs {
		if o.UID == uid {
			return true
		}
	}
	return false
}
