package kubelet

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/utils/ptr"
)

// A deleted pod drains for its longest preStop sleep, capped by the
// deletion's grace period; without a sleep it stops at once.
func TestPreStopSleep(t *testing.T) {
	sleep := func(s int64) corev1.Container {
		return corev1.Container{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Sleep: &corev1.SleepAction{Seconds: s}}}}
	}
	for _, tt := range []struct {
		name  string
		cs    []corev1.Container
		grace *int64
		want  time.Duration
	}{
		{"none", []corev1.Container{{}}, ptr.To[int64](30), 0},
		{"exec hook only", []corev1.Container{{Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{Exec: &corev1.ExecAction{}}}}}, nil, 0},
		{"longest", []corev1.Container{sleep(2), sleep(5)}, ptr.To[int64](30), 5 * time.Second},
		{"capped by grace", []corev1.Container{sleep(5)}, ptr.To[int64](1), time.Second},
		{"grace 0", []corev1.Container{sleep(5)}, ptr.To[int64](0), 0},
	} {
		pod := &corev1.Pod{Spec: corev1.PodSpec{Containers: tt.cs}}
		pod.DeletionGracePeriodSeconds = tt.grace
		if got := preStopSleep(pod); got != tt.want {
			t.Errorf("%s: %s, want %s", tt.name, got, tt.want)
		}
	}
}
