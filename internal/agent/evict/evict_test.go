package evict

import (
	"encoding/json"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestEvictionLimit(t *testing.T) {
	for _, tc := range []struct {
		nodes int
		share float64
		want  int
	}{
		{1, 0.34, 1}, {2, 0.34, 1}, {3, 0.34, 1}, {6, 0.34, 2}, {100, 0.34, 34}, {10, 1, 10}, {10, 0.01, 1}, {0, 0.34, 1},
	} {
		if got := evictionLimit(tc.nodes, tc.share); got != tc.want {
			t.Errorf("evictionLimit(%d, %v) = %d, want %d", tc.nodes, tc.share, got, tc.want)
		}
	}
}

// The patch sets exactly Ready and ContainersReady, False, with Mooring's
// reason: a strategic merge by type keeps every other condition.
func TestNotReadyPatch(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	b, err := notReadyPatch("node-2", now)
	if err != nil {
		t.Fatal(err)
	}
	var p struct {
		Status struct {
			Conditions []corev1.PodCondition `json:"conditions"`
		} `json:"status"`
	}
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	cs := p.Status.Conditions
	if len(cs) != 2 || cs[0].Type != corev1.PodReady || cs[1].Type != corev1.ContainersReady {
		t.Fatalf("conditions %+v", cs)
	}
	for _, c := range cs {
		if c.Status != corev1.ConditionFalse || c.Reason != PodReasonNodeUnreachable || !c.LastTransitionTime.Equal(&now) || c.Message == "" {
			t.Errorf("condition %+v", c)
		}
	}
}
