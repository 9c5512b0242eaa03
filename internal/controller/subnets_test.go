package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// announcer is node's L2Announcer with one interface eth0 on prefixes.
func announcer(node string, prefixes ...string) *mooringv1.L2Announcer {
	return &mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: node},
		Status: mooringv1.L2AnnouncerStatus{Interfaces: []mooringv1.AnnouncerInterface{{Name: "eth0", Index: 2, Prefixes: prefixes}}}}
}

func TestComputeNodeSubnets(t *testing.T) {
	node := func(name, role string) corev1.Node {
		return corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": role}}}
	}
	nodes := []corev1.Node{node("a", "edge"), node("b", "edge"), node("c", "edge"), node("d", "worker")}
	anns := []mooringv1.L2Announcer{
		// a's interfaces also hold a stale copy of a LoadBalancer address
		// (a /32) and loopback networks: neither is a node network.
		*announcer("a", "192.168.1.9/24", "2001:db8:1::/64", "192.168.7.100/32", "2001:db8:7::100/128", "127.0.0.0/8", "::1/128"),
		*announcer("b", "192.168.1.0/24", "bogus"),
		*announcer("c"), // an agent that publishes no networks
		*announcer("d", "10.0.0.0/8"),
	}
	pol := mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: mooringv1.L2AnnouncementPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "edge"}}}}
	ns := computeNodeSubnets(nodes, []mooringv1.L2AnnouncementPolicy{pol}, anns)
	if strings.Join(ns.announcing, ",") != "a,b,c" || strings.Join(ns.reporting, ",") != "a,b" ||
		len(ns.subnets) != 2 || ns.subnets[0].String() != "192.168.1.0/24" || len(ns.problems) != 1 {
		t.Fatalf("%+v", ns)
	}
	all := computeNodeSubnets(nodes, []mooringv1.L2AnnouncementPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "all"}}}, anns)
	if len(all.announcing) != 4 || len(all.subnets) != 3 || strings.Contains(fmt.Sprint(all.subnets), "192.168.7.100") {
		t.Fatalf("a policy without nodeSelector selects every node: %+v", all)
	}
	if none := computeNodeSubnets(nodes, []mooringv1.L2AnnouncementPolicy{pol}, nil); len(none.reporting) != 0 {
		t.Fatalf("no L2Announcers, yet reporting: %+v", none)
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
		// The stale /32's own address is no more reachable than its pool.
		{pool("192.168.7.100/32"), ns, metav1.ConditionTrue, "OutsideNodeSubnets"},
		{pool("192.168.1.0/24"), nodeSubnets{announcing: []string{"c"}}, metav1.ConditionUnknown, "SubnetsUnknown"},
		{pool("192.168.1.0/24"), nodeSubnets{}, metav1.ConditionUnknown, "NoAnnouncingNode"},
	} {
		p := tt.pool
		status, reason, msg := subnetCondition(toPool(&p).pool, tt.ns)
		if status != tt.status || reason != tt.reason {
			t.Errorf("%v: %s %s (%s), want %s %s", p.Spec.Blocks, status, reason, msg, tt.status, tt.reason)
		}
		if strings.Contains(msg, "/32") || strings.Contains(msg, "/128") || strings.Contains(msg, "127.0.0.0") {
			t.Errorf("a host address or loopback listed as a node network: %s", msg)
		}
		if reason == "OutsideNodeSubnets" && !strings.Contains(msg, "192.168.2.0-192.168.2.5") && !strings.Contains(msg, "192.168.7.100") {
			t.Errorf("message does not name the range outside: %s", msg)
		}
	}
}

// TestPoolOutsideNodeSubnets: on a real API server, the pool condition
// follows the networks the announcing nodes' agents publish in their
// L2Announcers; a node no policy selects does not count.
func TestPoolOutsideNodeSubnets(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	ctx := context.Background()
	startController(t, env.Config)
	create(t, c, nsPool("lan", "", "192.168.50.0/24"))
	create(t, c, nsPool("wrong", "", "10.99.0.0/24"))
	waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "NoAnnouncingNode")
	create(t, c, &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "edge"},
		Spec: mooringv1.L2AnnouncementPolicySpec{NodeSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "edge"}}}})
	for name, role := range map[string]string{"node-1": "edge", "node-2": "edge", "node-3": "worker"} {
		create(t, c, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"role": role}}})
	}
	msg := waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "SubnetsUnknown")
	if !strings.Contains(msg, "node-1, node-2") {
		t.Errorf("message %q should name the announcing nodes", msg)
	}

	// What an agent does: create its L2Announcer, then write its status.
	publish := func(a *mooringv1.L2Announcer) {
		t.Helper()
		var cur mooringv1.L2Announcer
		if err := c.Get(ctx, types.NamespacedName{Name: a.Name}, &cur); err != nil {
			cur = mooringv1.L2Announcer{ObjectMeta: metav1.ObjectMeta{Name: a.Name}}
			if err := c.Create(ctx, &cur); err != nil {
				t.Fatal(err)
			}
		}
		cur.Status = a.Status
		if err := c.Status().Update(ctx, &cur); err != nil {
			t.Fatal(err)
		}
	}
	publish(announcer("node-1", "192.168.50.0/24", "2001:db8:50::/64"))
	publish(announcer("node-3", "10.99.0.0/24")) // selected by no policy
	msg = waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "InsideNodeSubnets")
	if !strings.Contains(msg, "1 of 2 announcing nodes") {
		t.Errorf("message %q should say node-2 publishes nothing", msg)
	}
	msg = waitPoolCondition(t, env, "wrong", ConditionOutsideNodeSubnets, "OutsideNodeSubnets")
	if !strings.Contains(msg, "10.99.0.0-10.99.0.255") || !strings.Contains(msg, "192.168.50.0/24, 2001:db8:50::/64") ||
		strings.Contains(msg, "10.99.0.0/24") || !strings.Contains(msg, "L2AnnouncementPolicy") {
		t.Errorf("message %q should name the range, the announcing nodes' networks only, and what to do", msg)
	}
	if status := poolConditionStatus(t, c, "wrong"); status != metav1.ConditionTrue {
		t.Errorf("wrong: condition %s, want True", status)
	}
	if status := poolConditionStatus(t, c, "lan"); status != metav1.ConditionFalse {
		t.Errorf("lan: condition %s, want False", status)
	}

	// node-2 publishes the other network (a create), node-1 moves (an
	// update): both pools follow.
	publish(announcer("node-2", "10.99.0.0/23"))
	waitPoolCondition(t, env, "wrong", ConditionOutsideNodeSubnets, "InsideNodeSubnets")
	publish(announcer("node-1", "192.168.51.0/24"))
	msg = waitPoolCondition(t, env, "lan", ConditionOutsideNodeSubnets, "OutsideNodeSubnets")
	if !strings.Contains(msg, "192.168.50.0-192.168.50.255") {
		t.Errorf("message %q should name the range", msg)
	}
}

func poolConditionStatus(t *testing.T, c client.Client, name string) metav1.ConditionStatus {
	t.Helper()
	var p mooringv1.LoadBalancerIPPool
	if err := c.Get(context.Background(), types.NamespacedName{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	if cond := meta.FindStatusCondition(p.Status.Conditions, ConditionOutsideNodeSubnets); cond != nil {
		return cond.Status
	}
	return ""
}
