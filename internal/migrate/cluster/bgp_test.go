package cluster

import (
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/migrate"
)

// The hand-over keeps every imported BGPPeer off the nodes whose MetalLB
// speaker runs: each node-selector term gets the requirement, a peer with
// none gets it as its only term, and the imported object is not changed.
func TestKeptOffSpeakers(t *testing.T) {
	req := metav1.LabelSelectorRequirement{Key: migrate.SpeakerLabel, Operator: metav1.LabelSelectorOpDoesNotExist}
	rack := metav1.LabelSelector{MatchLabels: map[string]string{"rack": "a"}}
	edge := metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "edge", Operator: metav1.LabelSelectorOpExists}}}
	for _, tt := range []struct {
		name string
		in   []metav1.LabelSelector
		want []metav1.LabelSelector
	}{
		{"no selector: every node", nil, []metav1.LabelSelector{{MatchExpressions: []metav1.LabelSelectorRequirement{req}}}},
		{"two terms", []metav1.LabelSelector{rack, edge}, []metav1.LabelSelector{
			{MatchLabels: rack.MatchLabels, MatchExpressions: []metav1.LabelSelectorRequirement{req}},
			{MatchExpressions: []metav1.LabelSelectorRequirement{edge.MatchExpressions[0], req}}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			peer := mooringv1.BGPPeer{TypeMeta: metav1.TypeMeta{APIVersion: mooringv1.GroupVersion.String(), Kind: "BGPPeer"},
				ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: mooringv1.BGPPeerSpec{MyASN: 64513, PeerAddress: "10.0.0.1", NodeSelectors: tt.in}}
			m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&peer)
			if err != nil {
				t.Fatal(err)
			}
			in := &unstructured.Unstructured{Object: m}
			out, err := keptOffSpeakers(in)
			if err != nil {
				t.Fatal(err)
			}
			var got mooringv1.BGPPeer
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(out.Object, &got); err != nil {
				t.Fatal(err)
			}
			if !slices.EqualFunc(got.Spec.NodeSelectors, tt.want, func(a, b metav1.LabelSelector) bool {
				return metav1.FormatLabelSelector(&a) == metav1.FormatLabelSelector(&b)
			}) || got.Spec.PeerAddress != "10.0.0.1" {
				t.Errorf("got %+v, want node selectors %+v", got.Spec, tt.want)
			}
			sels, _, _ := unstructured.NestedSlice(in.Object, "spec", "nodeSelectors")
			if len(sels) != len(tt.in) {
				t.Errorf("the imported object's selectors changed: %v", sels)
			}
		})
	}
}
