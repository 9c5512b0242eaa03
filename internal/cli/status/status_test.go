package status

import (
	"bytes"
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

func TestStatusTable(t *testing.T) {
	held := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "echo",
			Annotations: map[string]string{mooringv1.AnnotationAnnouncedBy: "10.213.0.100=node-2/eth0"}},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status: corev1.ServiceStatus{
			LoadBalancer: corev1.LoadBalancerStatus{Ingress: []corev1.LoadBalancerIngress{{IP: "10.213.0.100"}}},
			Conditions:   []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue, Reason: "Assigned"}},
		},
	}
	pending := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "api"},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer},
		Status: corev1.ServiceStatus{Conditions: []metav1.Condition{{
			Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionFalse, Reason: "PoolExhausted",
			Message: "pool \"blue\" has no free IPv4 address"}}},
	}
	other := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "demo", Name: "internal"}}
	var b bytes.Buffer
	if err := Run(context.Background(), fake.NewClientset(held, pending, other), "", &b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 {
		t.Fatalf("want header + 2 LoadBalancer rows, got:\n%s", out)
	}
	if !strings.Contains(lines[1], "api") || !strings.Contains(lines[1], "<pending>") || !strings.Contains(lines[1], "False/PoolExhausted") || !strings.Contains(lines[1], "no free IPv4") {
		t.Errorf("pending row wrong: %q", lines[1])
	}
	if !strings.Contains(lines[2], "10.213.0.100") || !strings.Contains(lines[2], "node-2/eth0") || !strings.Contains(lines[2], "True/Assigned") {
		t.Errorf("assigned row wrong: %q", lines[2])
	}
}
