package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestBehaviours covers issue 3's Service behaviours on one control plane
// and one controller; each subtest owns a namespace and pools selecting
// only that namespace (label t=<scope>), so they do not interfere.
func TestBehaviours(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	for _, scope := range []string{"basic", "edge", "v6", "dual", "fam", "req", "off", "conf", "conf2", "choose", "share", "share2"} {
		mkNamespace(t, c, scope, map[string]string{"t": scope})
	}
	// A Service created before any pool exists.
	create(t, c, lbService("basic", "early"))
	run := startController(t, env.Config)

	t.Run("NoPoolThenPool", func(t *testing.T) {
		pending(t, env, "basic", "early", string(lbipam.ReasonNoPoolMatches))
		start := time.Now()
		create(t, c, nsPool("basic", "basic", "192.0.2.0/24"))
		waitIPs(t, c, "basic", "early", "192.0.2.1") // .0 is the network address: skipped
		t.Logf("address %s after the pool appeared", time.Since(start).Round(time.Millisecond))
		waitCondition(t, c, "basic", "early", mooringv1.ConditionAddressAssigned, ReasonAddressAssigned)
		waitEvent(t, env.Clientset, "basic", "early", ReasonAddressAssigned)
	})
	t.Run("FirstLastAndExhausted", func(t *testing.T) {
		create(t, c, nsPool("edge", "edge", "198.51.100.0/30"))
		for _, n := range []string{"a", "b", "c"} {
			create(t, c, lbService("edge", n))
		}
		waitIPs(t, c, "edge", "a", "198.51.100.1")
		waitIPs(t, c, "edge", "b", "198.51.100.2")
		pending(t, env, "edge", "c", string(lbipam.ReasonPoolExhausted))
	})
	t.Run("Slash32", func(t *testing.T) {
		create(t, c, nsPool("edge32", "edge", "203.0.113.7/32"))
		// edge's /30 is exhausted, so c now gets the /32's only address.
		waitIPs(t, c, "edge", "c", "203.0.113.7")
	})
	t.Run("IPv6", func(t *testing.T) {
		create(t, c, nsPool("v6", "v6", "2001:db8:1::/64"))
		create(t, c, lbService("v6", "only6", withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)))
		waitIPs(t, c, "v6", "only6", "2001:db8:1::1")
	})
	t.Run("DualStack", func(t *testing.T) {
		create(t, c, nsPool("dual", "dual", "100.64.0.0/24", "2001:db8:2::/64"))
		create(t, c, lbService("dual", "require", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)))
		create(t, c, lbService("dual", "prefer", withFamilies(corev1.IPFamilyPolicyPreferDualStack, corev1.IPv6Protocol, corev1.IPv4Protocol)))
		waitIPs(t, c, "dual", "require", "100.64.0.1", "2001:db8:2::1")
		waitIPs(t, c, "dual", "prefer", "100.64.0.2", "2001:db8:2::2")
	})
	t.Run("FamilyUnavailable", func(t *testing.T) {
		create(t, c, nsPool("fam", "fam", "100.64.1.0/24"))
		create(t, c, lbService("fam", "only6", withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)))
		create(t, c, lbService("fam", "require", withFamilies(corev1.IPFamilyPolicyRequireDualStack, corev1.IPv4Protocol, corev1.IPv6Protocol)))
		pending(t, env, "fam", "only6", string(lbipam.ReasonFamilyUnavailable))
		waitCondition(t, c, "fam", "require", mooringv1.ConditionAddressAssigned, string(lbipam.ReasonFamilyUnavailable))
		if ips := ingressIPs(getSvc(t, c, "fam", "require")); len(ips) != 0 {
			t.Errorf("RequireDualStack without IPv6 got %v; want nothing", ips)
		}
	})
	t.Run("Requested", func(t *testing.T) { requestedCases(t, env) })
	t.Run("DisabledPool", func(t *testing.T) {
		p := nsPool("off", "off", "100.64.3.0/24")
		p.Spec.Disabled = true
		create(t, c, p)
		create(t, c, lbService("off", "want", withAnn(mooringv1.AnnotationIPs, "100.64.3.5")))
		create(t, c, lbService("off", "any"))
		pending(t, env, "off", "want", string(lbipam.ReasonRequestedDisabled))
		pending(t, env, "off", "any", string(lbipam.ReasonNoPoolMatches))
	})
	t.Run("Conflicting", func(t *testing.T) { conflictCases(t, env) })
	t.Run("PoolAnnotation", func(t *testing.T) {
		hi := nsPool("choose-hi", "choose", "100.64.6.0/24")
		hi.Spec.Priority = ptr.To(int32(1))
		create(t, c, hi)
		create(t, c, nsPool("choose-lo", "choose", "100.64.7.0/24"))
		create(t, c, lbService("choose", "default"))
		create(t, c, lbService("choose", "picked", withAnn(mooringv1.AnnotationPool, "choose-lo")))
		create(t, c, lbService("choose", "unknown", withAnn(mooringv1.AnnotationPool, "no-such-pool")))
		waitIPs(t, c, "choose", "default", "100.64.6.1")
		waitIPs(t, c, "choose", "picked", "100.64.7.1")
		pending(t, env, "choose", "unknown", string(lbipam.ReasonPoolNotFound))
	})
	t.Run("Sharing", func(t *testing.T) { sharingCases(t, env) })
	t.Run("NamespaceLabelled", func(t *testing.T) {
		mkNamespace(t, c, "late", nil)
		create(t, c, nsPool("late", "late", "100.64.11.0/24"))
		create(t, c, lbService("late", "waiting"))
		pending(t, env, "late", "waiting", string(lbipam.ReasonNoPoolMatches))
		var ns corev1.Namespace
		if err := c.Get(context.Background(), types.NamespacedName{Name: "late"}, &ns); err != nil {
			t.Fatal(err)
		}
		ns.Labels = map[string]string{"t": "late"}
		if err := c.Update(context.Background(), &ns); err != nil {
			t.Fatal(err)
		}
		waitIPs(t, c, "late", "waiting", "100.64.11.1")
	})
	t.Run("InvalidPools", func(t *testing.T) {
		badSel := nsPool("bad-selector", "", "100.64.12.0/24")
		badSel.Spec.ServiceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: "Bogus", Values: []string{"x"}}}}
		create(t, c, badSel)
		create(t, c, nsPool("bad-range", "nothing", "2001:db8:9::9-2001:db8:9::1", "100.64.13.0/24"))
		waitPoolCondition(t, env, "bad-selector", mooringv1.ConditionReady, "InvalidSelector")
		waitPoolCondition(t, env, "bad-range", mooringv1.ConditionInvalidBlocks, "InvalidBlocks")
		// READY says so (issue 8 item 4), in the API's terms.
		msg := waitPoolCondition(t, env, "bad-range", mooringv1.ConditionReady, mooringv1.ConditionInvalidBlocks)
		inv := waitPoolCondition(t, env, "bad-range", mooringv1.ConditionInvalidBlocks, "InvalidBlocks")
		if !strings.Contains(inv, "spec.blocks[0]") || strings.Contains(inv, "ipalloc") || msg == "" {
			t.Errorf("InvalidBlocks message %q: want spec.blocks[0] and no package names", inv)
		}
		// bad-selector is the only pool without a namespace selector, and
		// an unparsable selector matches nothing: the Service stays pending.
		mkNamespace(t, c, "nosel", nil)
		create(t, c, lbService("nosel", "s", func(s *corev1.Service) { s.Labels = map[string]string{"app": "x"} }))
		pending(t, env, "nosel", "s", string(lbipam.ReasonNoPoolMatches))
	})
	t.Run("Metrics", func(t *testing.T) {
		eventually(t, 10*time.Second, func() string {
			checks := []struct {
				name   string
				labels []string
				ok     func(float64) bool
			}{
				{"mooring_lbipam_pools_conflicting", nil, func(v float64) bool { return v == 1 }},
				{"mooring_lbipam_services_pending", []string{"reason", string(lbipam.ReasonSharingConflict)}, func(v float64) bool { return v >= 1 }},
				{"mooring_lbipam_services_pending", []string{"reason", string(lbipam.ReasonFamilyUnavailable)}, func(v float64) bool { return v == 2 }},
				{"mooring_lbipam_pool_addresses", []string{"pool", "edge", "family", "ipv4", "state", "total"}, func(v float64) bool { return v == 2 }},
				{"mooring_lbipam_pool_addresses", []string{"pool", "edge", "family", "ipv4", "state", "free"}, func(v float64) bool { return v == 0 }},
				{"mooring_lbipam_allocations_total", nil, func(v float64) bool { return v >= 20 }},
			}
			for _, ch := range checks {
				if v := gauge(t, run.reg, ch.name, ch.labels...); !ch.ok(v) {
					return fmt.Sprintf("%s%v = %v", ch.name, ch.labels, v)
				}
			}
			return ""
		})
	})
	t.Run("OtherClassIgnored", func(t *testing.T) {
		create(t, c, lbService("basic", "foreign", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("example.com/other") }))
		create(t, c, lbService("basic", "marker"))
		waitIPs(t, c, "basic", "marker", "192.0.2.2")
		time.Sleep(time.Second)
		s := getSvc(t, c, "basic", "foreign")
		if len(s.Status.LoadBalancer.Ingress) != 0 || len(s.Status.Conditions) != 0 {
			t.Errorf("Service of another class was touched: %+v", s.Status)
		}
	})
}

func requestedCases(t *testing.T, env *testenv.Env) {
	c := env.Client
	create(t, c, nsPool("req", "req", "100.64.2.0/24"))
	create(t, c, lbService("req", "ann", withAnn(mooringv1.AnnotationIPs, "100.64.2.50")))
	create(t, c, lbService("req", "spec", func(s *corev1.Service) { s.Spec.LoadBalancerIP = "100.64.2.60" }))
	waitIPs(t, c, "req", "ann", "100.64.2.50")
	waitIPs(t, c, "req", "spec", "100.64.2.60")
	create(t, c, lbService("req", "outside", withAnn(mooringv1.AnnotationIPs, "100.64.9.9")))
	create(t, c, lbService("req", "taken", withAnn(mooringv1.AnnotationIPs, "100.64.2.50")))
	create(t, c, lbService("req", "garbage", withAnn(mooringv1.AnnotationIPs, "not-an-ip")))
	pending(t, env, "req", "outside", string(lbipam.ReasonRequestedOutside))
	pending(t, env, "req", "taken", string(lbipam.ReasonRequestedInUse))
	msg := pending(t, env, "req", "garbage", string(lbipam.ReasonInvalidRequest))
	if !strings.Contains(msg, mooringv1.AnnotationIPs) {
		t.Errorf("invalid-annotation message does not name the annotation: %q", msg)
	}
	// The Service's own request change moves it; nothing else does.
	s := getSvc(t, c, "req", "ann")
	s.Annotations[mooringv1.AnnotationIPs] = "100.64.2.51"
	if err := c.Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	waitIPs(t, c, "req", "ann", "100.64.2.51")
	// .50 is free now: the Service that wanted it gets it.
	waitIPs(t, c, "req", "taken", "100.64.2.50")
}

func conflictCases(t *testing.T, env *testenv.Env) {
	c := env.Client
	older := nsPool("conf-older", "conf", "100.64.4.0/24")
	create(t, c, older)
	time.Sleep(1100 * time.Millisecond) // creationTimestamp has second resolution
	newer := nsPool("conf-newer", "conf2", "100.64.4.128/25", "100.64.5.0/24")
	create(t, c, newer)
	eventually(t, 20*time.Second, func() string {
		var p mooringv1.LoadBalancerIPPool
		_ = c.Get(context.Background(), types.NamespacedName{Name: "conf-newer"}, &p)
		if meta.IsStatusConditionTrue(p.Status.Conditions, mooringv1.ConditionConflicting) {
			return ""
		}
		return "newer pool not Conflicting: " + condString(p.Status.Conditions)
	})
	var op mooringv1.LoadBalancerIPPool
	if err := c.Get(context.Background(), types.NamespacedName{Name: "conf-older"}, &op); err != nil {
		t.Fatal(err)
	}
	if !meta.IsStatusConditionFalse(op.Status.Conditions, mooringv1.ConditionConflicting) ||
		!meta.IsStatusConditionTrue(op.Status.Conditions, mooringv1.ConditionReady) {
		t.Errorf("older pool should be Ready and not Conflicting: %s", condString(op.Status.Conditions))
	}
	create(t, c, lbService("conf", "old-works"))
	waitIPs(t, c, "conf", "old-works", "100.64.4.1")
	create(t, c, lbService("conf2", "in-overlap", withAnn(mooringv1.AnnotationIPs, "100.64.4.200")))
	pending(t, env, "conf2", "in-overlap", string(lbipam.ReasonRequestedConflicting))
	create(t, c, lbService("conf2", "newer-rest"))
	waitIPs(t, c, "conf2", "newer-rest", "100.64.5.1") // nothing from the overlap
}

func sharingCases(t *testing.T, env *testenv.Env) {
	c := env.Client
	p := nsPool("share", "", "100.64.8.0/24")
	p.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
		{Key: "t", Operator: metav1.LabelSelectorOpIn, Values: []string{"share", "share2"}}}}
	create(t, c, p)
	key := withAnn(mooringv1.AnnotationSharingKey, "k")
	create(t, c, lbService("share", "web", key, withPorts(80)))
	waitIPs(t, c, "share", "web", "100.64.8.1")
	create(t, c, lbService("share", "tls", key, withPorts(443)))
	waitIPs(t, c, "share", "tls", "100.64.8.1")
	create(t, c, lbService("share", "clash", key, withPorts(80), withAnn(mooringv1.AnnotationIPs, "100.64.8.1")))
	pending(t, env, "share", "clash", string(lbipam.ReasonSharingConflict))

	create(t, c, lbService("share2", "other-ns", key, withPorts(8080), withAnn(mooringv1.AnnotationIPs, "100.64.8.1")))
	pending(t, env, "share2", "other-ns", string(lbipam.ReasonSharingConflict))
	for _, n := range [][2]string{{"share", "web"}, {"share", "tls"}, {"share2", "other-ns"}} {
		s := getSvc(t, c, n[0], n[1])
		s.Annotations[mooringv1.AnnotationSharingCrossNamespace] = "true"
		if err := c.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
	}
	waitIPs(t, c, "share2", "other-ns", "100.64.8.1")
}

func waitPoolCondition(t *testing.T, env *testenv.Env, name, typ, reason string) string {
	t.Helper()
	var msg string
	eventually(t, 20*time.Second, func() string {
		var p mooringv1.LoadBalancerIPPool
		_ = env.Client.Get(context.Background(), types.NamespacedName{Name: name}, &p)
		if cond := meta.FindStatusCondition(p.Status.Conditions, typ); cond != nil && cond.Reason == reason {
			msg = cond.Message
			return ""
		}
		return "pool " + name + ": " + condString(p.Status.Conditions)
	})
	return msg
}

func condString(cs []metav1.Condition) string {
	var b strings.Builder
	for _, c := range cs {
		b.WriteString(c.Type + "=" + string(c.Status) + "(" + c.Reason + ": " + c.Message + ") ")
	}
	return b.String()
}
