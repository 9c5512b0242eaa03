package controller

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

func TestToServiceFamilies(t *testing.T) {
	v4, v6 := corev1.IPv4Protocol, corev1.IPv6Protocol
	cases := []struct {
		policy     *corev1.IPFamilyPolicy
		fams       []corev1.IPFamily
		want       []lbipam.Family
		requireAll bool
	}{
		{nil, []corev1.IPFamily{v4}, []lbipam.Family{lbipam.IPv4}, true},
		{ptr.To(corev1.IPFamilyPolicySingleStack), []corev1.IPFamily{v6}, []lbipam.Family{lbipam.IPv6}, true},
		{ptr.To(corev1.IPFamilyPolicyPreferDualStack), []corev1.IPFamily{v6, v4}, []lbipam.Family{lbipam.IPv6, lbipam.IPv4}, false},
		{ptr.To(corev1.IPFamilyPolicyRequireDualStack), []corev1.IPFamily{v4, v6}, []lbipam.Family{lbipam.IPv4, lbipam.IPv6}, true},
	}
	for _, c := range cases {
		svc := lbService("ns", "s", func(s *corev1.Service) { s.Spec.IPFamilyPolicy, s.Spec.IPFamilies = c.policy, c.fams })
		got, err := toService(svc, nil)
		if err != nil || !slices.Equal(got.Families, c.want) || got.RequireAllFamilies != c.requireAll {
			t.Errorf("%v %v: got %v require=%v err=%v, want %v require=%v", c.policy, c.fams, got.Families, got.RequireAllFamilies, err, c.want, c.requireAll)
		}
	}
}

func TestToServiceRequest(t *testing.T) {
	svc := lbService("ns", "s",
		withAnn(mooringv1.AnnotationIPs, "192.0.2.5, 2001:db8::5"),
		withAnn(mooringv1.AnnotationPool, "a, b,a"),
		withAnn(mooringv1.AnnotationSharingKey, " k "),
		withAnn(mooringv1.AnnotationSharingCrossNamespace, "True"),
		withPorts(80, 443),
		func(s *corev1.Service) {
			s.Spec.LoadBalancerIP = "192.0.2.5"
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.5"}, {Hostname: "lb.example"}, {IP: "bogus"}}
		})
	got, err := toService(svc, map[string]string{"team": "a"})
	if err != nil {
		t.Fatal(err)
	}
	want := []netip.Addr{netip.MustParseAddr("192.0.2.5"), netip.MustParseAddr("2001:db8::5")}
	if !slices.Equal(got.Requested, want) {
		t.Errorf("Requested %v, want %v (spec.loadBalancerIP merged, not repeated)", got.Requested, want)
	}
	if !slices.Equal(got.Pools, []string{"a", "b"}) || got.SharingKey != "k" || !slices.Equal(got.SharingNamespaces, []string{"*"}) {
		t.Errorf("pools %v key %q cross %v", got.Pools, got.SharingKey, got.SharingNamespaces)
	}
	if !slices.Equal(got.Held, want[:1]) || len(got.Ports) != 2 || got.NamespaceLabels["team"] != "a" {
		t.Errorf("held %v ports %v ns %v", got.Held, got.Ports, got.NamespaceLabels)
	}
}

func TestToServiceInvalid(t *testing.T) {
	for _, mut := range []func(*corev1.Service){
		withAnn(mooringv1.AnnotationIPs, "192.0.2.5,,"),
		withAnn(mooringv1.AnnotationIPs, "192.0.2.5,192.0.2.6"),
		func(s *corev1.Service) { s.Spec.LoadBalancerIP = "nope" },
	} {
		svc := lbService("ns", "s", mut, func(s *corev1.Service) {
			s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "192.0.2.9"}}
		})
		got, err := toService(svc, nil)
		if err == nil {
			t.Errorf("%v: no error", svc.Annotations)
			continue
		}
		if !strings.Contains(err.Error(), mooringv1.AnnotationIPs) && !strings.Contains(err.Error(), "loadBalancerIP") {
			t.Errorf("error does not name the field: %v", err)
		}
		if len(got.Held) != 1 || len(got.Requested) != 0 {
			t.Errorf("invalid request must keep held %v and request nothing (%v)", got.Held, got.Requested)
		}
	}
}

func TestClassify(t *testing.T) {
	other := lbService("ns", "o", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("x/y") })
	mine := lbService("ns", "m", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To(mooringv1.LoadBalancerClass) })
	plain := lbService("ns", "p")
	cip := lbService("ns", "c", func(s *corev1.Service) { s.Spec.Type = corev1.ServiceTypeClusterIP })
	serve, adopt := classes{defaultClass: true}, classes{defaultClass: true, adoptOnly: true}
	for _, c := range []struct {
		svc  *corev1.Service
		cl   classes
		want classification
	}{
		{other, serve, foreignClass}, {mine, classes{}, ours}, {plain, serve, ours}, {plain, classes{}, foreignClass}, {cip, serve, notLoadBalancer},
		{plain, adopt, adopted}, {mine, adopt, ours}, {other, adopt, foreignClass},
	} {
		if got := classify(c.svc, c.cl); got != c.want {
			t.Errorf("%s %+v: %v, want %v", c.svc.Name, c.cl, got, c.want)
		}
	}
}

// Other systems' request annotations: used when no mooring.dev/ one of the
// same kind is set; contradictions are invalid requests.
func TestForeignAnnotations(t *testing.T) {
	local := func(s *corev1.Service) {
		s.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
		s.Spec.Selector = map[string]string{"app": "web"}
	}
	for _, c := range []struct {
		name    string
		mut     []func(*corev1.Service)
		ips     string
		pools   string
		key     string
		nss     string
		backend string
		err     string
	}{
		{name: "metallb", mut: []func(*corev1.Service){withAnn(annMetalLBIPs, "192.0.2.5"), withAnn(annMetalLBPool, "lan"), withAnn(annMetalLBShared, "k")},
			ips: "192.0.2.5", pools: "lan", key: "k", nss: "*"},
		{name: "metallb twins", mut: []func(*corev1.Service){withAnn(annMetalLBIPsOld, "192.0.2.5"), withAnn(annMetalLBPoolOld, "lan"), withAnn(annMetalLBSharedOld, "k")},
			ips: "192.0.2.5", pools: "lan", key: "k", nss: "*"},
		{name: "cilium", mut: []func(*corev1.Service){withAnn(annCiliumIPs, "192.0.2.5,2001:db8::5"), withAnn(annCiliumSharing, "k"), withAnn(annCiliumCrossNS, "b, a")},
			ips: "192.0.2.5,2001:db8::5", key: "k", nss: "a,b"},
		{name: "cilium twins, same namespace only", mut: []func(*corev1.Service){withAnn(annCiliumIPsOld, "192.0.2.5"), withAnn(annCiliumSharingOld, "k")},
			ips: "192.0.2.5", key: "k"},
		{name: "mooring wins", mut: []func(*corev1.Service){withAnn(mooringv1.AnnotationIPs, "192.0.2.9"), withAnn(annMetalLBIPs, "192.0.2.5"), withAnn(annCiliumIPs, "192.0.2.6"),
			withAnn(mooringv1.AnnotationSharingKey, "m"), withAnn(annMetalLBShared, "k")}, ips: "192.0.2.9", key: "m"},
		{name: "agreeing systems", mut: []func(*corev1.Service){withAnn(annMetalLBIPs, "192.0.2.5"), withAnn(annCiliumIPs, " 192.0.2.5 "), withAnn(annMetalLBShared, "k"), withAnn(annCiliumSharing, "k")},
			ips: "192.0.2.5", key: "k"},
		{name: "contradicting addresses", mut: []func(*corev1.Service){withAnn(annMetalLBIPs, "192.0.2.5"), withAnn(annCiliumIPs, "192.0.2.6")}, err: "contradict"},
		{name: "contradicting twins", mut: []func(*corev1.Service){withAnn(annMetalLBPool, "a"), withAnn(annMetalLBPoolOld, "b")}, err: annMetalLBPoolOld},
		{name: "contradicting keys", mut: []func(*corev1.Service){withAnn(annMetalLBShared, "a"), withAnn(annCiliumSharingOld, "b")}, err: "contradict"},
		{name: "malformed foreign", mut: []func(*corev1.Service){withAnn(annMetalLBIPs, "nope")}, err: annMetalLBIPs},
		{name: "eTP Local backend", mut: []func(*corev1.Service){local}, backend: "local:app=web"},
		{name: "mooring cross-namespace list", mut: []func(*corev1.Service){withAnn(mooringv1.AnnotationSharingKey, "k"), withAnn(mooringv1.AnnotationSharingCrossNamespace, "x,y")}, key: "k", nss: "x,y"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := toService(lbService("ns", "s", c.mut...), nil)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one containing %q", err, c.err)
				}
				if len(got.Requested) != 0 {
					t.Fatalf("invalid request must request nothing: %v", got.Requested)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var ips []string
			for _, a := range got.Requested {
				ips = append(ips, a.String())
			}
			if strings.Join(ips, ",") != c.ips || strings.Join(got.Pools, ",") != c.pools || got.SharingKey != c.key ||
				strings.Join(got.SharingNamespaces, ",") != c.nss || got.SharingBackend != c.backend {
				t.Fatalf("got ips %v pools %v key %q nss %v backend %q", ips, got.Pools, got.SharingKey, got.SharingNamespaces, got.SharingBackend)
			}
		})
	}
}

func TestToPool(t *testing.T) {
	p := &mooringv1.LoadBalancerIPPool{
		ObjectMeta: metav1.ObjectMeta{Name: "p", CreationTimestamp: metav1.NewTime(time.Unix(100, 0))},
		Spec: mooringv1.LoadBalancerIPPoolSpec{
			Blocks: []mooringv1.IPBlock{{CIDR: "192.0.2.0/24"}, {Start: "2001:db8::9", Stop: "2001:db8::1"}},
			ServiceSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "app", Operator: "Bogus", Values: []string{"x"}}}},
			Priority: ptr.To(int32(3)),
		},
	}
	in := toPool(p)
	// The reversed IPv6 range reaches the core, which reports it by family
	// (a Service's IPv6 reason names it instead of asking for a block).
	if len(in.pool.Blocks) != 2 || len(in.invalidBlocks) != 0 {
		t.Errorf("blocks %v invalid %v: both blocks must reach the core, which reports the reversed one", in.pool.Blocks, in.invalidBlocks)
	}
	rep := lbipam.NewAllocator().SetPools([]lbipam.Pool{in.pool})
	if len(rep) != 1 || len(rep[0].Invalid) != 1 || !strings.Contains(rep[0].Invalid[0], "spec.blocks[1]: start 2001:db8::9 is after stop 2001:db8::1") {
		t.Errorf("the core must report the reversed block as spec.blocks[1]: %+v", rep)
	}
	if in.selectorError == "" || in.pool.ServiceSelector == nil || in.pool.ServiceSelector.Matches(map[string]string{"app": "x"}) {
		t.Errorf("an invalid selector must match nothing and be reported: %q", in.selectorError)
	}
	if in.pool.NamespaceSelector != nil || *in.pool.Priority != 3 || !in.pool.Created.Equal(time.Unix(100, 0)) {
		t.Errorf("pool %+v", in.pool)
	}
}

func TestIngressAdoptedAsIs(t *testing.T) {
	cur := []corev1.LoadBalancerIngress{{IP: "2001:db8::1"}, {IP: "192.0.2.1"}}
	got := ingressFor(cur, []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")})
	if got[0].IP != "2001:db8::1" || got[0].IPMode != nil {
		t.Errorf("an equal set must be kept exactly as written: %+v", got)
	}
}
