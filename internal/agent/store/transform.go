package store

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// The informer caches keep only what the agent reads: at 10,000 Services
// full Service, EndpointSlice and Node objects (managedFields, the
// last-applied annotation, ports, addresses, node images and conditions)
// dominate the agent's memory. Each transform returns a new, small object
// built from the fields internal/agent/convert, the peers and the Events use; a field
// read anywhere else in the agent must be added here.
//
// The decision reads Services and EndpointSlices from the compact store
// (store.go), not from these caches; their transforms stay so that a
// read through the informer cache, which would start an informer for the
// type, still holds only slim objects.

// Transforms returns the per-type cache transforms. The L2Announcers are
// slimmed to the member list the partition release reads (one small
// object per node; internal/agent/gossip).
func Transforms() map[client.Object]cache.ByObject {
	return map[client.Object]cache.ByObject{
		&corev1.Service{}:                 {Transform: slimService},
		&discoveryv1.EndpointSlice{}:      {Transform: slimSlice},
		&corev1.Node{}:                    {Transform: slimNode},
		&mooringv1.L2AnnouncementPolicy{}: {Transform: cache.TransformStripManagedFields()},
		&mooringv1.L2Announcer{}:          {Transform: slimAnnouncer},
	}
}

func slimAnnouncer(obj any) (any, error) {
	an, ok := obj.(*mooringv1.L2Announcer)
	if !ok {
		return tombstoneOr(obj)
	}
	return &mooringv1.L2Announcer{TypeMeta: an.TypeMeta, ObjectMeta: slimMeta(&an.ObjectMeta),
		Status: mooringv1.L2AnnouncerStatus{Members: an.Status.Members}}, nil
}

// IndexSliceService indexes EndpointSlices by the Service they belong to,
// so a Service event reads that Service's slices and not every slice of
// its namespace.
const IndexSliceService = "mooring.endpointslice.service"

// SliceService is the IndexSliceService index function.
func SliceService(o client.Object) []string {
	if n := o.GetLabels()[discoveryv1.LabelServiceName]; n != "" {
		return []string{n}
	}
	return nil
}

// slimMeta keeps identity, labels and the keys of annotations keep names.
func slimMeta(m *metav1.ObjectMeta, keep ...string) metav1.ObjectMeta {
	out := metav1.ObjectMeta{Name: m.Name, Namespace: m.Namespace, UID: m.UID, ResourceVersion: m.ResourceVersion,
		Generation: m.Generation, Labels: m.Labels, DeletionTimestamp: m.DeletionTimestamp}
	for _, k := range keep {
		if v, ok := m.Annotations[k]; ok {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out
}

func slimService(obj any) (any, error) {
	svc, ok := obj.(*corev1.Service)
	if !ok {
		return tombstoneOr(obj)
	}
	out := &corev1.Service{TypeMeta: svc.TypeMeta, ObjectMeta: slimMeta(&svc.ObjectMeta),
		Spec: corev1.ServiceSpec{Type: svc.Spec.Type, LoadBalancerClass: svc.Spec.LoadBalancerClass,
			ExternalIPs: svc.Spec.ExternalIPs, ExternalTrafficPolicy: svc.Spec.ExternalTrafficPolicy}}
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		out.Status.LoadBalancer.Ingress = append(out.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ing.IP})
	}
	return out, nil
}

func slimSlice(obj any) (any, error) {
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok {
		return tombstoneOr(obj)
	}
	out := &discoveryv1.EndpointSlice{TypeMeta: es.TypeMeta, ObjectMeta: slimMeta(&es.ObjectMeta), AddressType: es.AddressType}
	if n, ok := es.Labels[discoveryv1.LabelServiceName]; ok {
		out.Labels = map[string]string{discoveryv1.LabelServiceName: n}
	} else {
		out.Labels = nil
	}
	for _, ep := range es.Endpoints {
		out.Endpoints = append(out.Endpoints, discoveryv1.Endpoint{NodeName: ep.NodeName,
			Conditions: discoveryv1.EndpointConditions{Ready: ep.Conditions.Ready}})
	}
	return out, nil
}

func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return tombstoneOr(obj)
	}
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: slimMeta(&n.ObjectMeta),
		Spec: corev1.NodeSpec{PodCIDRs: n.Spec.PodCIDRs}} // internal/agent/evict: a dead node's conntrack entries
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			out.Status.Addresses = append(out.Status.Addresses, a)
		}
	}
	return out, nil
}

// tombstoneOr passes tombstones through: the handlers only read their key.
func tombstoneOr(obj any) (any, error) {
	if _, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
		return obj, nil
	}
	return nil, fmt.Errorf("unexpected object %T in a transform", obj)
}
