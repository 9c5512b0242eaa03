package podipamctl

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
)

func TestSlimKeepsWhatTheNodeSideReads(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "7", Labels: map[string]string{"a": "b"},
		Annotations:   map[string]string{"mooring.dev/pod-ip-pool": "tenant-a"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}}
	n, _ := slimNode(&corev1.Node{ObjectMeta: meta, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.0.0.0/24"}, PodCIDR: "10.0.0.0/24"},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.0.2.1"}},
			Images: []corev1.ContainerImage{{Names: []string{"big"}}}}})
	node := n.(*corev1.Node)
	if node.Name != "n1" || node.UID != "u1" || node.ResourceVersion != "7" || node.Spec.PodCIDRs[0] != "10.0.0.0/24" ||
		node.Status.Addresses[0].Address != "192.0.2.1" || node.Status.Images != nil || node.ManagedFields != nil || node.Labels != nil {
		t.Fatalf("slim node %+v", node)
	}
	p, _ := slimAnnotated(&corev1.Pod{ObjectMeta: func() metav1.ObjectMeta { m := meta; m.Namespace = "ns"; return m }(),
		Spec: corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c"}}}})
	pod := p.(*corev1.Pod)
	if pod.Namespace != "ns" || pod.Annotations["mooring.dev/pod-ip-pool"] != "tenant-a" || pod.Spec.NodeName != "n1" ||
		pod.Spec.Containers != nil || pod.ManagedFields != nil {
		t.Fatalf("slim pod %+v", pod)
	}
	ns, _ := slimAnnotated(&corev1.Namespace{ObjectMeta: meta})
	if x := ns.(*corev1.Namespace); x.Annotations["mooring.dev/pod-ip-pool"] != "tenant-a" || x.ManagedFields != nil {
		t.Fatalf("slim namespace %+v", x)
	}
	tomb := toolscache.DeletedFinalStateUnknown{Key: "n1"}
	if got, _ := slimNode(tomb); got != tomb {
		t.Fatalf("tombstone changed: %v", got)
	}
}
