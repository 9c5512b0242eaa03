package convert

import (
	"net/netip"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/announce"
)

func TestBuildInput(t *testing.T) {
	web := agenttest.LBService("default", "web", "10.213.0.100", "fd00:213::64")
	web.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	web.Spec.ExternalIPs = []string{"192.0.2.1", "not-an-ip"}
	other := agenttest.LBService("default", "other-class", "10.213.0.101")
	other.Spec.LoadBalancerClass = ptr.To("example.com/lb")
	ours := agenttest.LBService("default", "ours", "10.213.0.102")
	ours.Spec.LoadBalancerClass = ptr.To(mooringv1.LoadBalancerClass)
	cluster := agenttest.LBService("default", "cluster-ip", "10.213.0.103")
	cluster.Spec.Type = corev1.ServiceTypeClusterIP
	slice := discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "web-abc", Labels: map[string]string{discoveryv1.LabelServiceName: "web"}},
		Endpoints: []discoveryv1.Endpoint{
			{NodeName: ptr.To("node-1"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}},
			{NodeName: ptr.To("node-2"), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(false)}},
			{NodeName: ptr.To("node-3")}, // nil ready means ready
			{},                           // no node
		},
	}
	pol := mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "p"}, Spec: mooringv1.L2AnnouncementPolicySpec{
		ServiceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{"web"}}}},
		Interfaces:      []string{"eth0"},
		ExternalIPs:     true,
	}}
	in := Input(Objects{
		Policies: []mooringv1.L2AnnouncementPolicy{pol},
		Services: []corev1.Service{web, other, ours, cluster},
		Slices:   []discoveryv1.EndpointSlice{slice},
		Nodes:    []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "node-1", Labels: map[string]string{"zone": "a"}}}},
	})
	wantPol := announce.Policy{Name: "p", LoadBalancerIPs: true, ExternalIPs: true, Interfaces: []string{"eth0"},
		ServiceSelector: &announce.Selector{MatchExpressions: []announce.Requirement{{Key: "app", Operator: announce.OpIn, Values: []string{"web"}}}}}
	if !reflect.DeepEqual(in.Policies, []announce.Policy{wantPol}) {
		t.Fatalf("policies %+v", in.Policies)
	}
	s := in.Services[0]
	if !reflect.DeepEqual(s.IngressIPs, []netip.Addr{netip.MustParseAddr("10.213.0.100"), netip.MustParseAddr("fd00:213::64")}) ||
		!reflect.DeepEqual(s.ExternalIPs, []netip.Addr{netip.MustParseAddr("192.0.2.1")}) ||
		!s.LocalTraffic || !reflect.DeepEqual(s.ReadyNodes, []string{"node-1", "node-3"}) ||
		s.Key.Name != "web" || s.Labels["app"] != "web" {
		t.Fatalf("web converted to %+v", s)
	}
	if len(in.Services[1].IngressIPs) != 0 || len(in.Services[2].IngressIPs) != 1 || len(in.Services[3].IngressIPs) != 0 {
		t.Fatalf("class/type filtering: %+v", in.Services[1:])
	}
	if in.Nodes[0].Name != "node-1" || in.Nodes[0].Labels["zone"] != "a" {
		t.Fatalf("nodes %+v", in.Nodes)
	}
}

func TestPeersOf(t *testing.T) {
	node := func(name, ip string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: name}, {Type: corev1.NodeInternalIP, Address: ip}}}}
	}
	got := PeersOf([]corev1.Node{node("node-1", "10.213.0.11"), node("node-2", "fd00:213::c"), {ObjectMeta: metav1.ObjectMeta{Name: "bare"}}}, "node-1", 7946)
	if want := []string{"[fd00:213::c]:7946"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("peers %v, want %v", got, want)
	}
}
