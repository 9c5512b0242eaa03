package podipamctl

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The node side's informers keep only what it reads: with direct routes it
// caches every Node of the cluster, and a full Node (images, conditions,
// managedFields) is ten times what it needs. Objects of these caches are
// never written back. Anything that is not the expected type (a
// tombstone) passes through unchanged.

func slimMeta(m *metav1.ObjectMeta, annotations bool) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion}
	if annotations {
		out.Annotations = m.Annotations
	}
	return out
}

// slimNode keeps a Node's name and UID (the registration's owner
// reference), spec.podCIDRs (kubernetes mode) and addresses (direct routes).
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: slimMeta(&n.ObjectMeta, false),
		Spec:   corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
		Status: corev1.NodeStatus{Addresses: n.Status.Addresses}}, nil
}

// slimAnnotated keeps a Pod's or Namespace's key and annotations (the pool
// annotation).
func slimAnnotated(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Pod:
		return &corev1.Pod{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta, true), Spec: corev1.PodSpec{NodeName: o.Spec.NodeName}}, nil
	case *corev1.Namespace:
		return &corev1.Namespace{TypeMeta: o.TypeMeta, ObjectMeta: slimMeta(&o.ObjectMeta, true)}, nil
	}
	return obj, nil
}
