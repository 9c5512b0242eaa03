package kube

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func TestPodReady(t *testing.T) {
	cond := func(typ corev1.PodConditionType, st corev1.ConditionStatus) corev1.PodCondition {
		return corev1.PodCondition{Type: typ, Status: st}
	}
	for _, tc := range []struct {
		name  string
		conds []corev1.PodCondition
		want  bool
	}{
		{"no conditions", nil, false},
		{"ready", []corev1.PodCondition{cond(corev1.PodScheduled, corev1.ConditionTrue), cond(corev1.PodReady, corev1.ConditionTrue)}, true},
		{"not ready", []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionFalse)}, false},
		{"unknown", []corev1.PodCondition{cond(corev1.PodReady, corev1.ConditionUnknown)}, false},
		{"only containers ready", []corev1.PodCondition{cond(corev1.ContainersReady, corev1.ConditionTrue)}, false},
	} {
		p := &corev1.Pod{Status: corev1.PodStatus{Conditions: tc.conds}}
		if got := PodReady(p); got != tc.want {
			t.Errorf("%s: PodReady = %v, want %v", tc.name, got, tc.want)
		}
	}
}
