package status

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// Pod IPAM joins each Node's podCIDRs and mismatch condition with its
// PodIPAMNode's blocks and true conditions, and prints after the Services
// (table) or as podIPAM (json).
func TestPodIPAMSection(t *testing.T) {
	nodes := []corev1.Node{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.99.0.0/24"}},
			Status: corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: mooringv1.ConditionPodCIDRMismatch,
				Status: corev1.ConditionTrue, Message: "node.spec.podCIDRs 10.99.0.0/24 differ from Mooring's block 10.244.1.0/24"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Spec: corev1.NodeSpec{PodCIDRs: []string{"10.244.0.0/24"}}},
	}
	recs := []mooringv1.PodIPAMNode{
		{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: mooringv1.PodIPAMNodeStatus{
			Blocks:     []mooringv1.PodIPAMBlock{{Pool: "default", CIDR: "10.244.0.0/24"}},
			Conditions: []metav1.Condition{{Type: mooringv1.ConditionExhausted, Status: metav1.ConditionFalse, Message: "fine"}}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "node-2"}, Status: mooringv1.PodIPAMNodeStatus{
			Blocks:     []mooringv1.PodIPAMBlock{{Pool: "default", CIDR: "10.244.1.0/24"}},
			Conditions: []metav1.Condition{{Type: mooringv1.ConditionExhausted, Status: metav1.ConditionTrue, Message: `pool "blue" has no free block`}}}},
	}
	pi := podIPAMOf("cluster-pool", nodes, recs)
	if len(pi.Nodes) != 2 || pi.Nodes[0].Node != "node-1" || len(pi.Nodes[0].Problems) != 0 || len(pi.Nodes[1].Problems) != 2 {
		t.Fatalf("pod IPAM = %+v", pi)
	}
	var b bytes.Buffer
	if err := PrintAll(&b, OutputWide, nil, pi, time.Now()); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"Pod IPAM: mode cluster-pool", "default=10.244.0.0/24", "10.99.0.0/24",
		"MooringPodCIDRMismatch: node.spec.podCIDRs 10.99.0.0/24 differ", `Exhausted: pool "blue" has no free block`} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
	b.Reset()
	if err := PrintAll(&b, OutputJSON, nil, pi, time.Now()); err != nil {
		t.Fatal(err)
	}
	var l List
	if err := json.Unmarshal(b.Bytes(), &l); err != nil || l.PodIPAM == nil || l.PodIPAM.Mode != "cluster-pool" {
		t.Fatalf("json: %v %s", err, b.String())
	}
	b.Reset()
	if err := Print(&b, OutputJSON, nil, time.Now()); err != nil || strings.Contains(b.String(), "podIPAM") {
		t.Fatalf("without pod IPAM the document has no podIPAM: %v %s", err, b.String())
	}
}
