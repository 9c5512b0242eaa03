package kubelet

import (
	"net/netip"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestNthAddr(t *testing.T) {
	if got := nthAddr(netip.MustParsePrefix("10.244.3.0/24"), 2); got.String() != "10.244.3.2" {
		t.Errorf("v4: %s", got)
	}
	if got := nthAddr(netip.MustParsePrefix("fd00:244:0:3::/64"), 2); got.String() != "fd00:244:0:3::2" {
		t.Errorf("v6: %s", got)
	}
}

// The status is what EndpointSlices are built from: pod IPs per family,
// Ready, and the phase.
func TestPodStatus(t *testing.T) {
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "echo", Image: "x"}}}}
	p := &pod{addrs: []netip.Addr{netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00:244:0:1::2")},
		started: metav1.Now(), proc: &podProcess{}}
	nodeIPs := []netip.Addr{netip.MustParseAddr("10.213.0.11"), netip.MustParseAddr("fd00:213::b")}
	st := podStatus(obj, p, nodeIPs, true, "")
	if st.Phase != corev1.PodRunning || st.PodIP != "10.244.1.2" || len(st.PodIPs) != 2 || st.HostIP != "10.213.0.11" {
		t.Fatalf("status = %+v", st)
	}
	if !ready(st) || !st.ContainerStatuses[0].Ready {
		t.Fatal("a ready pod is not Ready")
	}
	st = podStatus(&corev1.Pod{Spec: obj.Spec, Status: st}, p, nodeIPs, false, "echo process exited")
	if ready(st) || st.Phase != corev1.PodFailed || st.ContainerStatuses[0].State.Terminated == nil {
		t.Fatalf("failed pod status = %+v", st)
	}
}

func ready(st corev1.PodStatus) bool {
	for _, c := range st.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func TestPodPort(t *testing.T) {
	obj := &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Ports: []corev1.ContainerPort{{ContainerPort: 9000}}}}}}
	if podPort(obj) != 9000 || podPort(&corev1.Pod{}) != DefaultPort {
		t.Fatal("podPort")
	}
}
