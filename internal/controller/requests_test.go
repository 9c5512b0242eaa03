package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// TestRequestRules covers issue 8 items 1–3 and issue 11 item 2 on a real
// API server: invalid requests get nothing new, requested addresses are
// never handed out automatically, a sharing key whose ports collide stays
// pending, and MetalLB's and Cilium's annotations are honoured.
func TestRequestRules(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	for _, scope := range []string{"inv", "order", "key", "mlb", "cil"} {
		mkNamespace(t, c, scope, map[string]string{"t": scope})
	}
	startController(t, env.Config)

	t.Run("InvalidRequestGetsNothing", func(t *testing.T) {
		create(t, c, nsPool("inv", "inv", "100.70.0.0/24", "fd00:213::/120"))
		create(t, c, lbService("inv", "v4-asks-v6", withAnn(mooringv1.AnnotationIPs, "fd00:213::17")))
		msg := pending(t, env, "inv", "v4-asks-v6", string(lbipam.ReasonInvalidRequest))
		if !strings.Contains(msg, "spec.ipFamilies") {
			t.Errorf("message %q does not name spec.ipFamilies", msg)
		}
	})
	t.Run("RequestsServedFirst", func(t *testing.T) {
		p := nsPool("order", "order", "100.70.1.0/30")
		create(t, c, p)
		create(t, c, lbService("order", "want", withAnn(mooringv1.AnnotationIPs, "100.70.1.0")))
		pending(t, env, "order", "want", string(lbipam.ReasonRequestedNotAllowed))
		for _, n := range []string{"a", "b", "c"} {
			create(t, c, lbService("order", n))
		}
		waitIPs(t, c, "order", "a", "100.70.1.1")
		waitIPs(t, c, "order", "b", "100.70.1.2")
		pending(t, env, "order", "c", string(lbipam.ReasonPoolExhausted))
		// allowFirstLastIPs frees .0 and .3 at once; the pass re-looks at
		// "want" and "c" in any order, and .0 must go to "want".
		// A merge patch: the controller writes the pool's status at the
		// same time, so a Get + Update can meet a conflict.
		var cur mooringv1.LoadBalancerIPPool
		if err := c.Get(context.Background(), types.NamespacedName{Name: "order"}, &cur); err != nil {
			t.Fatal(err)
		}
		base := cur.DeepCopy()
		cur.Spec.AllowFirstLastIPs = true
		if err := c.Patch(context.Background(), &cur, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
		waitIPs(t, c, "order", "want", "100.70.1.0")
		waitIPs(t, c, "order", "c", "100.70.1.3")
	})
	t.Run("SharingKeyPortsCollide", func(t *testing.T) {
		create(t, c, nsPool("key", "key", "100.70.2.0/24"))
		key := withAnn(mooringv1.AnnotationSharingKey, "k1")
		create(t, c, lbService("key", "share-a", key, withPorts(80)))
		waitIPs(t, c, "key", "share-a", "100.70.2.1")
		create(t, c, lbService("key", "share-b", key, withPorts(80)))
		msg := pending(t, env, "key", "share-b", string(lbipam.ReasonSharingConflict))
		if !strings.Contains(msg, `"key/share-a"`) || !strings.Contains(msg, "TCP port 80") {
			t.Errorf("message %q should name the holder and the port", msg)
		}
		// Fixing the ports lets it join.
		s := getSvc(t, c, "key", "share-b")
		s.Spec.Ports[0].Port, s.Spec.Ports[0].Name = 8080, "p8080"
		if err := c.Update(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		waitIPs(t, c, "key", "share-b", "100.70.2.1")
	})
	t.Run("MetalLBAnnotations", func(t *testing.T) {
		create(t, c, nsPool("mlb-a", "mlb", "100.70.3.0/24"))
		create(t, c, nsPool("mlb-b", "mlb", "100.70.4.0/24"))
		create(t, c, lbService("mlb", "ip", withAnn("metallb.io/loadBalancerIPs", "100.70.3.50")))
		create(t, c, lbService("mlb", "old-ip", withAnn("metallb.universe.tf/loadBalancerIPs", "100.70.3.51")))
		create(t, c, lbService("mlb", "pool", withAnn("metallb.io/address-pool", "mlb-b")))
		create(t, c, lbService("mlb", "web", withAnn("metallb.io/allow-shared-ip", "front"), withPorts(80)))
		create(t, c, lbService("mlb", "tls", withAnn("metallb.universe.tf/allow-shared-ip", "front"), withPorts(443)))
		create(t, c, lbService("mlb", "wins", withAnn(mooringv1.AnnotationIPs, "100.70.3.60"), withAnn("metallb.io/loadBalancerIPs", "100.70.3.61")))
		create(t, c, lbService("mlb", "contradiction", withAnn("metallb.io/loadBalancerIPs", "100.70.3.70"), withAnn("lbipam.cilium.io/ips", "100.70.3.71")))
		waitIPs(t, c, "mlb", "ip", "100.70.3.50")
		waitIPs(t, c, "mlb", "old-ip", "100.70.3.51")
		waitIPs(t, c, "mlb", "pool", "100.70.4.1")
		waitIPs(t, c, "mlb", "wins", "100.70.3.60")
		web := ingressIPs(getSvc(t, c, "mlb", "web"))
		eventually(t, 20*time.Second, func() string {
			web = ingressIPs(getSvc(t, c, "mlb", "web"))
			if tls := ingressIPs(getSvc(t, c, "mlb", "tls")); len(web) == 1 && strings.Join(tls, ",") == web[0] {
				return ""
			}
			return "web and tls do not share: " + strings.Join(web, ",")
		})
		msg := pending(t, env, "mlb", "contradiction", string(lbipam.ReasonInvalidRequest))
		if !strings.Contains(msg, "contradict") {
			t.Errorf("message %q", msg)
		}
	})
	t.Run("CiliumAnnotations", func(t *testing.T) {
		p := nsPool("cil", "", "100.70.5.0/24")
		p.Spec.NamespaceSelector = nil
		p.Spec.Namespaces = []string{"cil", "mlb"} // the pool's own namespace filter
		create(t, c, p)
		create(t, c, lbService("cil", "ip", withAnn("lbipam.cilium.io/ips", "100.70.5.9")))
		create(t, c, lbService("cil", "alias", withAnn("io.cilium/lb-ipam-ips", "100.70.5.10")))
		cross := func(ns string) func(*corev1.Service) {
			return func(s *corev1.Service) {
				s.Annotations["lbipam.cilium.io/sharing-key"] = "edge"
				s.Annotations["lbipam.cilium.io/sharing-cross-namespace"] = ns
			}
		}
		create(t, c, lbService("cil", "dns", cross("mlb"), withPorts(53), withAnn("lbipam.cilium.io/ips", "100.70.5.53")))
		create(t, c, lbService("mlb", "dns-too", cross("cil"), withPorts(5353), withAnn("lbipam.cilium.io/ips", "100.70.5.53")))
		waitIPs(t, c, "cil", "ip", "100.70.5.9")
		waitIPs(t, c, "cil", "alias", "100.70.5.10")
		waitIPs(t, c, "cil", "dns", "100.70.5.53")
		waitIPs(t, c, "mlb", "dns-too", "100.70.5.53")
	})
}

// TestAdoptOnly: during a migration the controller records what
// class-less Services hold and request, writes nothing to them and
// allocates nothing for them; Services of its own class are served. Once
// the operator turns adopt-only off, the class-less ones are served.
func TestAdoptOnly(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	mkNamespace(t, c, "mig", nil)
	create(t, c, nsPool("mig", "", "100.71.0.0/24"))
	held := lbService("mig", "held") // served by MetalLB, say
	create(t, c, held)
	setIngress(t, c, held, "100.71.0.1")
	waiting := lbService("mig", "waiting", withAnn("metallb.io/loadBalancerIPs", "100.71.0.2"))
	create(t, c, waiting)

	run := startController(t, env.Config, func(cfg *Config) { cfg.AdoptOnly = true })
	create(t, c, lbService("mig", "mine", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(mooringv1.LoadBalancerClass) }))
	// .1 is held and .2 requested by class-less Services: "mine" gets .3.
	waitIPs(t, c, "mig", "mine", "100.71.0.3")
	eventually(t, 20*time.Second, func() string {
		if gauge(t, run.reg, "mooring_lbipam_adopt_only_services", "state", "in_pools") == 1 &&
			gauge(t, run.reg, "mooring_lbipam_adopt_only_services", "state", "no_address") == 1 {
			return ""
		}
		return "adopt-only gauge not 1 in_pools + 1 no_address"
	})
	for _, n := range []string{"held", "waiting"} {
		if s := getSvc(t, c, "mig", n); len(s.Status.Conditions) != 0 || (n == "waiting" && len(s.Status.LoadBalancer.Ingress) != 0) {
			t.Errorf("adopt-only wrote to %s: %+v", n, s.Status)
		}
	}
	// The leader publishes the mode on its Lease (what `mooring migrate
	// metallb run` checks).
	leaseSays := func(want string) {
		t.Helper()
		eventually(t, 20*time.Second, func() string {
			var l coordinationv1.Lease
			if err := c.Get(context.Background(), client.ObjectKey{Namespace: DefaultLeaseNamespace, Name: DefaultLeaseName}, &l); err != nil {
				return err.Error()
			}
			if got := l.Annotations[AnnotationAdoptOnly]; got != want {
				return fmt.Sprintf("Lease says %s=%q, want %q", AnnotationAdoptOnly, got, want)
			}
			return ""
		})
	}
	leaseSays("true")
	run.stop()

	startController(t, env.Config) // the operator switched adopt-only off
	leaseSays("false")
	waitIPs(t, c, "mig", "waiting", "100.71.0.2")
	waitIPs(t, c, "mig", "held", "100.71.0.1")
	waitCondition(t, c, "mig", "held", mooringv1.ConditionAddressAssigned, ReasonAddressAssigned)
}
