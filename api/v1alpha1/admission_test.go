package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestPoolAdmission proves on a real kube-apiserver that the CRD's CEL rules
// reject bad pools at admission with a message that names the fix, and admit
// good ones.
func TestPoolAdmission(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cases := []struct {
		name    string
		blocks  []mooringv1.IPBlock
		wantErr string // substring of the admission error; "" means admitted
	}{
		{"cidr v4", []mooringv1.IPBlock{{CIDR: "192.0.2.0/24"}}, ""},
		{"cidr v6 /64", []mooringv1.IPBlock{{CIDR: "2001:db8:1::/64"}}, ""},
		{"range v4", []mooringv1.IPBlock{{Start: "192.0.2.10", Stop: "192.0.2.20"}}, ""},
		{"range v4 one address", []mooringv1.IPBlock{{Start: "192.0.2.10", Stop: "192.0.2.10"}}, ""},
		{"range v6", []mooringv1.IPBlock{{Start: "2001:db8::10", Stop: "2001:db8::20"}}, ""},
		{"bad cidr text", []mooringv1.IPBlock{{CIDR: "banana"}}, "cidr must be a network in CIDR notation"},
		{"bad cidr prefix", []mooringv1.IPBlock{{CIDR: "192.0.2.0/33"}}, "cidr must be a network in CIDR notation"},
		{"cidr host bits", []mooringv1.IPBlock{{CIDR: "192.0.2.7/24"}}, "write the network address"},
		{"start after stop", []mooringv1.IPBlock{{Start: "192.0.2.20", Stop: "192.0.2.10"}}, "start must not be greater than stop"},
		{"start after stop in third octet", []mooringv1.IPBlock{{Start: "192.0.3.1", Stop: "192.0.2.255"}}, "start must not be greater than stop"},
		{"mixed families", []mooringv1.IPBlock{{Start: "192.0.2.1", Stop: "2001:db8::1"}}, "cannot mix IPv4 and IPv6"},
		{"bad start", []mooringv1.IPBlock{{Start: "192.0.2", Stop: "192.0.2.9"}}, "start must be a single IPv4 or IPv6 address"},
		{"empty block", []mooringv1.IPBlock{{}}, "set exactly one form"},
		{"start without stop", []mooringv1.IPBlock{{Start: "192.0.2.1"}}, "set exactly one form"},
		{"cidr and range", []mooringv1.IPBlock{{CIDR: "192.0.2.0/24", Start: "192.0.2.1", Stop: "192.0.2.2"}}, "set exactly one form"},
		{"no blocks", []mooringv1.IPBlock{}, "spec.blocks"},
		// Issue 19 item 9: what can never be a Service address.
		{"zero prefix v4", []mooringv1.IPBlock{{CIDR: "0.0.0.0/0"}}, "a /0 block is every address"},
		{"zero prefix v6", []mooringv1.IPBlock{{CIDR: "::/0"}}, "a /0 block is every address"},
		{"loopback v4", []mooringv1.IPBlock{{CIDR: "127.0.0.0/8"}}, "cidr contains loopback"},
		{"loopback inside", []mooringv1.IPBlock{{CIDR: "127.1.2.0/24"}}, "cidr contains loopback"},
		{"loopback v6", []mooringv1.IPBlock{{CIDR: "::1/128"}}, "cidr contains loopback"},
		{"multicast", []mooringv1.IPBlock{{CIDR: "224.0.0.0/4"}}, "cidr contains multicast"},
		{"multicast v6", []mooringv1.IPBlock{{CIDR: "ff02::/16"}}, "cidr contains multicast"},
		{"link-local v6", []mooringv1.IPBlock{{CIDR: "fe80::/64"}}, "cidr contains link-local"},
		{"link-local v4", []mooringv1.IPBlock{{CIDR: "169.254.0.0/24"}}, "cidr contains link-local"},
		{"this network", []mooringv1.IPBlock{{CIDR: "0.0.0.0/8"}}, "cidr contains the unspecified"},
		{"unspecified v6", []mooringv1.IPBlock{{CIDR: "::/128"}}, "cidr contains the unspecified"},
		{"broadcast", []mooringv1.IPBlock{{CIDR: "255.255.255.255/32"}}, "limited broadcast"},
		{"class E with broadcast", []mooringv1.IPBlock{{CIDR: "240.0.0.0/4"}}, "limited broadcast"},
		{"v6 larger than /48", []mooringv1.IPBlock{{CIDR: "2001:db8::/47"}}, "at most one /48"},
		{"v6 range larger than /48", []mooringv1.IPBlock{{Start: "2001:db8:0:ffff::", Stop: "2001:db8:1::1"}}, "at most one /48"},
		{"range starts in loopback", []mooringv1.IPBlock{{Start: "127.0.0.1", Stop: "127.0.0.9"}}, "start is an unspecified, loopback"},
		{"range stops in multicast", []mooringv1.IPBlock{{Start: "223.255.255.0", Stop: "224.0.0.1"}}, "stop is an unspecified, loopback"},
		{"range v6 link-local", []mooringv1.IPBlock{{Start: "fe80::1", Stop: "fe80::9"}}, "start is an unspecified, loopback"},
		{"range spans loopback", []mooringv1.IPBlock{{Start: "126.255.255.250", Stop: "128.0.0.1"}}, "the range includes loopback"},
		{"range spans link-local", []mooringv1.IPBlock{{Start: "169.253.0.0", Stop: "169.255.0.0"}}, "the range includes loopback"},
		{"range spans multicast", []mooringv1.IPBlock{{Start: "223.0.0.0", Stop: "240.0.0.1"}}, "the range includes loopback"},
		{"v6 /48 admitted", []mooringv1.IPBlock{{CIDR: "2001:db8:2::/48"}}, ""},
		{"v4 next to loopback admitted", []mooringv1.IPBlock{{Start: "126.0.0.1", Stop: "126.255.255.255"}, {CIDR: "128.0.0.0/8"}}, ""},
		{"v4 next to link-local admitted", []mooringv1.IPBlock{{Start: "169.253.0.0", Stop: "169.253.255.255"}, {Start: "169.255.0.0", Stop: "169.255.0.9"}}, ""},
		{"class E below broadcast admitted", []mooringv1.IPBlock{{CIDR: "240.0.0.0/5"}}, ""},
		// IPv6 order cannot be checked in CEL within the cost budget (see
		// IPBlock): admitted, and the controller reports InvalidBlocks.
		{"v6 start after stop is admitted", []mooringv1.IPBlock{{Start: "2001:db8::20", Stop: "2001:db8::10"}}, ""},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := &mooringv1.LoadBalancerIPPool{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pool-%d", i)},
				Spec:       mooringv1.LoadBalancerIPPoolSpec{Blocks: tc.blocks},
			}
			err := env.Client.Create(ctx, pool)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid pool rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid pool admitted; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
			t.Logf("rejected as expected: %v", err)
		})
	}

	spec := func(mut func(*mooringv1.LoadBalancerIPPoolSpec)) mooringv1.LoadBalancerIPPoolSpec {
		s := mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "198.51.100.0/24"}}}
		mut(&s)
		return s
	}
	for i, tc := range []struct {
		name    string
		spec    mooringv1.LoadBalancerIPPoolSpec
		wantErr string
	}{
		{"namespaces", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) { s.Namespaces = []string{"shop", "web-1"} }), ""},
		{"namespace not a DNS label", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) { s.Namespaces = []string{"Shop_1"} }), "spec.namespaces[0]"},
		{"namespace twice", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) { s.Namespaces = []string{"a", "a"} }), "Duplicate value"},
		{"selector terms", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) {
			s.SelectorTerms = []mooringv1.PoolSelectorTerm{{Namespaces: []string{"shop"}},
				{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"tier": "shop"}}, ServiceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": "front"}}}}
		}), ""},
		{"empty selector term", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) { s.SelectorTerms = []mooringv1.PoolSelectorTerm{{}} }), "a selector term must set namespaces, namespaceSelector or serviceSelector"},
		{"selector term namespace not a DNS label", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) {
			s.SelectorTerms = []mooringv1.PoolSelectorTerm{{Namespaces: []string{"Shop_1"}}}
		}), "spec.selectorTerms[0].namespaces[0]"},
		{"all options", spec(func(s *mooringv1.LoadBalancerIPPoolSpec) {
			s.AutoAssign, s.AvoidBuggyIPs, s.Priority = ptr(false), true, ptr(int32(3))
		}), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pool := &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "opts-" + string(rune('a'+i))}, Spec: tc.spec}
			err := env.Client.Create(ctx, pool)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("valid pool rejected: %v", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("error %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// TestPoolDefaultsAndColumns: a pool written without the optional fields
// reads back with autoAssign true and disabled false, so `kubectl get
// lbpools` shows DISABLED false (not empty); READY and REASON columns exist.
func TestPoolDefaultsAndColumns(t *testing.T) {
	env := testenv.StartT(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pool := &mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "plain"},
		Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "198.51.100.0/24"}}}}
	if err := env.Client.Create(ctx, pool); err != nil {
		t.Fatal(err)
	}
	var got unstructured.Unstructured
	got.SetGroupVersionKind(mooringv1.GroupVersion.WithKind("LoadBalancerIPPool"))
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "plain"}, &got); err != nil {
		t.Fatal(err)
	}
	disabled, found, _ := unstructured.NestedBool(got.Object, "spec", "disabled")
	auto, foundAuto, _ := unstructured.NestedBool(got.Object, "spec", "autoAssign")
	if !found || disabled || !foundAuto || !auto {
		t.Fatalf("defaults: disabled=%v (set %v) autoAssign=%v (set %v)", disabled, found, auto, foundAuto)
	}
	var crd unstructured.Unstructured
	crd.SetAPIVersion("apiextensions.k8s.io/v1")
	crd.SetKind("CustomResourceDefinition")
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "loadbalancerippools.mooring.dev"}, &crd); err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	var cols []string
	if len(versions) > 0 {
		pcs, _, _ := unstructured.NestedSlice(versions[0].(map[string]any), "additionalPrinterColumns")
		for _, c := range pcs {
			cols = append(cols, c.(map[string]any)["name"].(string))
		}
	}
	if want := "Ready,Reason,Disabled"; !strings.HasPrefix(strings.Join(cols, ","), want) {
		t.Fatalf("printer columns %v, want them to start with %s", cols, want)
	}
}
