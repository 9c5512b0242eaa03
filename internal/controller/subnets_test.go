package controller

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

func TestComputeNodeSubnets(t *testing.T) {
	node := func(name, role, subnets string) corev1.Node {
		n := corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": role}, Annotations: map[string]string{}}}
		if subnets != "" {
			n.Annotations[AnnotationL2Subnets] = subnets
		}
		return n
	}
	nodes := []corev1.Node{
		node("a", "edge", "192.168.1.9/24, 2001:db8:1::/64"),
		node("b", "edge", "192.168.1.0/24,bogus"),
		node("c", "edge", ""),
		node("d", "worker", "10.0.0.0/8"),
	}
	pol := mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: mooringv1.L2AnnouncementPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "edge"}}}}
	ns := computeNodeSubnets(nodes, []mooringv1.L2AnnouncementPolicy{pol})
	if strings.Join(ns.announcing, ",") != "a,b,c" || strings.Join(ns.reporting, ",") != "a,b" ||
		len(ns.subnets) != 2 || ns.subnets[0].String() != "192.168.1.0/24" || len(ns.problems) != 1 {
		t.Fatalf("%+v", ns)
	}
	all := computeNodeSubnets(nodes, []mooringv1.L2AnnouncementPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}})
	if len(all.announcing) != 4 {
		t.Fatalf("a policy without nodeSelector selects every node: %+v", all)
	}

	pool := func(blocks ...string) mooringv1.LoadBalancerIPPool { return *nsPool("p", "", blocks...) }
	for _, tt := range []struct {
		pool   mooringv1.LoadBalancerIPPool
		ns     nodeSubnets
		status metav1.ConditionStatus
		reason string
	}{
		{pool("192.168.1.0/24"), ns, metav1.ConditionFalse, "InsideNodeSubnets"},
		{pool("192.168.1.240-192.168.2.5"), ns, metav1.ConditionTrue, "OutsideNodeSubnets"},
		{pool("192.168.1.0/24"), nodeSubnets{announcing: []string{"c"}}, metav1.ConditionUnknown, "SubnetsUnknown"},
		{pool("192.168.1.0/24"), nodeSubnets{}, metav1.ConditionUnknown, "NoAnnouncingNode"},
	} {
		p := tt.pool
		status, reason, msg := subnetCondition(toPool(&p).pool, tt.ns)
		if status != tt.status || reason != tt.reason {
			t.Errorf("%v: %s %s (%s), want %s %s", p.Spec.Blocks, status, reason, msg, tt.status, tt.reason)
		}
		if reason == "OutsideNodeSubnets" && !strings.Contains(msg, "192.168.2.0-192.168.2.5") {
			t.Errorf("message does not name the range outside: %s", msg)
		}
	}
}

// TestPoolOutsideNodeSubnets: on a real API server, the pool condition
// follows the announcing nodes' published networks.
func TestPoolOutsideNodeSubnets(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	startController(t, env.Config)
	create(t, c, nsPool("lan", "", "192.168.50.0/24"))
	create(t, c, nsPool("wrong", "", "10.99.0.0/24"))
	waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "NoAnnouncingNode")
	create(t, c, &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}})
	create(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}})
	waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "SubnetsUnknown")

	var n corev1.Node
	if err := c.Get(context.Background(), types.NamespacedName{Name: "node-1"}, &n); err != nil {
		t.Fatal(err)
	}
	n.Annotations = map[string]string{AnnotationL2Subnets: "192.168.50.0/24"}
	if err := c.Update(context.Background(), &n); err != nil {
		t.Fatal(err)
	}
	waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "InsideNodeSubnets")
	msg := waitPoolCondition(t, env, "wrong", ConditionOutsideNodeSubnets, "OutsideNodeSubnets")
	if !strings.Contains(msg, "10.99.0.0-10.99.0.255") || !strings.Contains(msg, "192.168.50.0/24") {
		t.Errorf("message %q should name the range and the nodes' network", msg)
	}
}
