package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// TestAddressSafety is issue 19 items 4 and 9 on a real API server.
func TestAddressSafety(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	for _, ns := range []string{"tenant-a", "tenant-b", "unusable"} {
		mkNamespace(t, c, ns, nil)
	}
	// Pools stored before the CRD refused unusable blocks (an upgrade):
	// the admission rules are stripped here so the controller's own check
	// is what this test proves (api/v1alpha1's admission test proves the
	// rules).
	stripBlockValidation(t, env.Config, c)
	startController(t, env.Config)

	// The reproduction from the issue: a pool for tenant-a with two
	// addresses; two tenant-b Services request them and stay pending; the
	// tenant-a Service then gets an address (it got PoolExhausted before).
	t.Run("TenantSquatting", func(t *testing.T) {
		p := nsPool("tenant-a", "", "100.73.0.10-100.73.0.11")
		p.Spec.Namespaces = []string{"tenant-a"}
		create(t, c, p)
		for i, addr := range []string{"100.73.0.10", "100.73.0.11"} {
			create(t, c, lbService("tenant-b", fmt.Sprintf("squat-%d", i), withAnn(mooringv1.AnnotationIPs, addr)))
		}
		for i := range 2 {
			pending(t, env, "tenant-b", fmt.Sprintf("squat-%d", i), string(lbipam.ReasonRequestedNotAllowed))
		}
		create(t, c, lbService("tenant-a", "web"))
		waitIPs(t, c, "tenant-a", "web", "100.73.0.10")
	})

	t.Run("UnusablePools", func(t *testing.T) {
		bad := []string{"0.0.0.0/0", "127.0.0.0/8", "224.0.0.0/4", "fe80::/64", "::/0"}
		for i, block := range bad {
			p := nsPool(fmt.Sprintf("unusable-%d", i), "", block)
			p.Spec.Namespaces = []string{"unusable"}
			create(t, c, p)
		}
		for i, block := range bad {
			msg := waitPoolCondition(t, env, fmt.Sprintf("unusable-%d", i), mooringv1.ConditionReady, mooringv1.ConditionInvalidBlocks)
			if !strings.Contains(msg, block) || !strings.Contains(msg, "use addresses of the nodes' network") {
				t.Errorf("pool with %s: READY message %q does not name the block and the fix", block, msg)
			}
		}
		v6 := withFamilies(corev1.IPFamilyPolicySingleStack, corev1.IPv6Protocol)
		create(t, c, lbService("unusable", "auto-v4"))
		create(t, c, lbService("unusable", "auto-v6", v6))
		requests := []struct{ addr, what string }{{"0.0.0.1", "this network"}, {"127.0.0.1", "loopback"},
			{"224.0.0.1", "multicast"}, {"fe80::1", "link-local"}, {"::1", "loopback"}}
		for i, r := range requests {
			mut := []func(*corev1.Service){withAnn(mooringv1.AnnotationIPs, r.addr)}
			if strings.Contains(r.addr, ":") {
				mut = append(mut, v6)
			}
			create(t, c, lbService("unusable", fmt.Sprintf("req-%d", i), mut...))
		}
		// Automatic: the pools select the namespace but hold nothing usable.
		pending(t, env, "unusable", "auto-v4", string(lbipam.ReasonFamilyUnavailable))
		pending(t, env, "unusable", "auto-v6", string(lbipam.ReasonFamilyUnavailable))
		for i, r := range requests {
			msg := pending(t, env, "unusable", fmt.Sprintf("req-%d", i), string(lbipam.ReasonRequestedOutside))
			if !strings.Contains(msg, r.addr) || !strings.Contains(msg, r.what) || !strings.Contains(msg, "can never be a Service address") {
				t.Errorf("request of %s: message %q does not say it is %s", r.addr, msg, r.what)
			}
		}
		// Nothing in the namespace ever got an address.
		var svcs corev1.ServiceList
		if err := c.List(context.Background(), &svcs); err != nil {
			t.Fatal(err)
		}
		for _, s := range svcs.Items {
			if s.Namespace == "unusable" && len(ingressIPs(&s)) > 0 {
				t.Errorf("%s/%s got %v", s.Namespace, s.Name, ingressIPs(&s))
			}
		}
	})
}

// stripBlockValidation removes the CEL rules of LoadBalancerIPPool's
// blocks, as if the pools had been stored by an older CRD, and waits until
// the API server admits a /0 pool.
func stripBlockValidation(t *testing.T, rc *rest.Config, c client.Client) {
	t.Helper()
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	crds := dc.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	crd, err := crds.Get(ctx, "loadbalancerippools.mooring.dev", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	versions, _, _ := unstructured.NestedSlice(crd.Object, "spec", "versions")
	for _, v := range versions {
		items, _, _ := unstructured.NestedMap(v.(map[string]any), "schema", "openAPIV3Schema", "properties", "spec", "properties", "blocks", "items")
		delete(items, "x-kubernetes-validations")
		props, _ := items["properties"].(map[string]any)
		for _, f := range []string{"cidr", "start", "stop"} {
			if m, ok := props[f].(map[string]any); ok {
				delete(m, "x-kubernetes-validations")
			}
		}
		if err := unstructured.SetNestedMap(v.(map[string]any), items, "schema", "openAPIV3Schema", "properties", "spec", "properties", "blocks", "items"); err != nil {
			t.Fatal(err)
		}
	}
	if err := unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions"); err != nil {
		t.Fatal(err)
	}
	if _, err := crds.Update(ctx, crd, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	probe := nsPool("probe-zero", "", "0.0.0.0/0")
	eventually(t, 30*time.Second, func() string {
		if err := c.Create(ctx, probe.DeepCopy()); err != nil {
			return "the stripped CRD still refuses a /0: " + err.Error()
		}
		return ""
	})
	_ = c.Delete(ctx, probe)
}
