package agenttest

import (
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// RealisticService is a LoadBalancer Service as `kubectl apply` and the
// controller leave it (last-applied annotation, managedFields, ports).
func RealisticService(i int) *corev1.Service {
	name := fmt.Sprintf("svc-%05d", i)
	ip := fmt.Sprintf("10.%d.%d.%d", 100+i/65536, i/256%256, i%256)
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bulk", UID: "6f1c2d3e-0000-4000-8000-00000000abcd",
			ResourceVersion: fmt.Sprint(100000 + i), Labels: map[string]string{"app": name, "team": "payments"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": `{"apiVersion":"v1","kind":"Service","metadata":{"annotations":{},"labels":{"app":"` + name + `","team":"payments"},"name":"` + name + `","namespace":"bulk"},"spec":{"ports":[{"name":"http","port":80,"targetPort":8080}],"selector":{"app":"` + name + `"},"type":"LoadBalancer"}}`},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl-client-side-apply", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:metadata":{"f:annotations":{".":{},"f:kubectl.kubernetes.io/last-applied-configuration":{}},"f:labels":{".":{},"f:app":{},"f:team":{}}},"f:spec":{"f:allocateLoadBalancerNodePorts":{},"f:externalTrafficPolicy":{},"f:internalTrafficPolicy":{},"f:ports":{".":{},"k:{\"port\":80,\"protocol\":\"TCP\"}":{".":{},"f:name":{},"f:port":{},"f:protocol":{},"f:targetPort":{}}},"f:selector":{},"f:sessionAffinity":{},"f:type":{}}}`)}},
				{Manager: "mooring-controller", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1", FieldsType: "FieldsV1", Subresource: "status",
					FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:status":{"f:conditions":{".":{},"k:{\"type\":\"mooring.dev/AddressAssigned\"}":{}},"f:loadBalancer":{"f:ingress":{}}}}`)}},
			}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": name},
			Ports:     []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromInt32(8080), NodePort: int32(30000 + i%2000)}},
			ClusterIP: fmt.Sprintf("10.96.%d.%d", i/256%256, i%256), ClusterIPs: []string{fmt.Sprintf("10.96.%d.%d", i/256%256, i%256)},
			IPFamilies: []corev1.IPFamily{corev1.IPv4Protocol}, IPFamilyPolicy: ptr.To(corev1.IPFamilyPolicySingleStack),
			ExternalTrafficPolicy: corev1.ServiceExternalTrafficPolicyCluster, InternalTrafficPolicy: ptr.To(corev1.ServiceInternalTrafficPolicyCluster),
			SessionAffinity: corev1.ServiceAffinityNone, AllocateLoadBalancerNodePorts: ptr.To(true)},
		Status: corev1.ServiceStatus{LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: ip, IPMode: ptr.To(corev1.LoadBalancerIPModeVIP)}}},
			Conditions: []metav1.Condition{{Type: "mooring.dev/AddressAssigned", Status: metav1.ConditionTrue, Reason: "Assigned", Message: "assigned " + ip + " from pool default"}}},
	}
	return Decoded(svc)
}

func RealisticSlice(i int) *discoveryv1.EndpointSlice {
	name := fmt.Sprintf("svc-%05d", i)
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name + "-x7k2p", GenerateName: name + "-", Namespace: "bulk", UID: "7a1c2d3e-0000-4000-8000-00000000abcd",
			ResourceVersion: fmt.Sprint(200000 + i),
			Labels: map[string]string{discoveryv1.LabelServiceName: name, discoveryv1.LabelManagedBy: "endpointslice-controller.k8s.io",
				"app": name, "team": "payments"},
			Annotations:     map[string]string{"endpoints.kubernetes.io/last-change-trigger-time": "2026-11-30T13:00:00Z"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "Service", Name: name, UID: "6f1c2d3e-0000-4000-8000-00000000abcd", Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kube-controller-manager", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "discovery.k8s.io/v1", FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:addressType":{},"f:endpoints":{},"f:metadata":{"f:annotations":{".":{},"f:endpoints.kubernetes.io/last-change-trigger-time":{}},"f:generateName":{},"f:labels":{".":{},"f:app":{},"f:endpointslice.kubernetes.io/managed-by":{},"f:kubernetes.io/service-name":{},"f:team":{}},"f:ownerReferences":{".":{},"k:{\"uid\":\"6f1c2d3e\"}":{}}},"f:ports":{}}`)}}}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Protocol: ptr.To(corev1.ProtocolTCP), Port: ptr.To(int32(8080))}},
	}
	for j := range 2 {
		es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{
			Addresses:  []string{fmt.Sprintf("10.244.%d.%d", j, i%250)},
			Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true), Serving: ptr.To(true), Terminating: ptr.To(false)},
			NodeName:   ptr.To(fmt.Sprintf("node-%d", 1+(i+j)%3)), Zone: ptr.To("zone-a"),
			TargetRef: &corev1.ObjectReference{Kind: "Pod", Namespace: "bulk", Name: fmt.Sprintf("%s-5d8f7c9b6-%05d", name, j), UID: "8b1c2d3e-0000-4000-8000-00000000abcd"},
		})
	}
	return Decoded(es)
}

// Decoded round-trips obj through JSON, as the informer's decoder leaves
// it: every string its own allocation.
func Decoded[T any](obj *T) *T {
	b, err := json.Marshal(obj)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

// VariedService is RealisticService(i) with every field the decision
// reads varied across i.
func VariedService(i int) *corev1.Service {
	svc := RealisticService(i)
	switch i % 7 {
	case 1:
		svc.Spec.ExternalIPs = []string{"192.0.2.7", "2001:db8::7", "not-an-ip"}
	case 2:
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	case 3:
		svc.Spec.LoadBalancerClass = ptr.To("other.example/lb")
	case 4:
		svc.Spec.Type = corev1.ServiceTypeClusterIP
	case 5:
		svc.Status.LoadBalancer.Ingress = append(svc.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: "2001:db8::1:5"}, corev1.LoadBalancerIngress{Hostname: "lb.example"})
	case 6:
		svc.Labels = nil
		svc.Status.LoadBalancer.Ingress = nil
	}
	return svc
}

// VariedSlices are RealisticSlice(i) with unready and node-less endpoints,
// and a second slice for some Services.
func VariedSlices(i int) []*discoveryv1.EndpointSlice {
	es := RealisticSlice(i)
	switch i % 5 {
	case 1:
		es.Endpoints[0].Conditions.Ready = ptr.To(false)
	case 2:
		es.Endpoints[1].NodeName = nil
		es.Endpoints[0].Conditions.Ready = nil // absent means ready
	case 3:
		second := RealisticSlice(i)
		second.Name += "-b"
		second.Endpoints[0].NodeName = ptr.To("node-9")
		return []*discoveryv1.EndpointSlice{es, second}
	}
	return []*discoveryv1.EndpointSlice{es}
}
