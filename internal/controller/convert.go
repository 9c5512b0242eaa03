package controller

// This file is the one conversion layer between API objects and the pure
// core: Services, Namespaces and LoadBalancerIPPools in, lbipam inputs out.
// Nothing here talks to the API server.

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// serviceKey names a Service for the core.
func serviceKey(svc *corev1.Service) lbipam.ServiceKey {
	return lbipam.ServiceKey{Namespace: svc.Namespace, Name: svc.Name}
}

// classification says what the controller does with a Service.
type classification int

const (
	notLoadBalancer classification = iota // release whatever it held
	foreignClass                          // someone else's (or being deleted): reserve its addresses, never write
	adopted                               // class-less under AdoptOnly: record what it holds and requests, never write
	ours                                  // allocate and write status
)

// classes is how the controller decides which Services are its own.
type classes struct{ defaultClass, adoptOnly bool }

func classify(svc *corev1.Service, cl classes) classification {
	switch {
	case svc.Spec.Type != corev1.ServiceTypeLoadBalancer:
		return notLoadBalancer
	case !svc.DeletionTimestamp.IsZero():
		// Still shown with its address until a finalizer lets go: keep the
		// address reserved so nobody else shows it too; release when gone.
		return foreignClass
	}
	switch {
	case svc.Spec.LoadBalancerClass == nil && cl.defaultClass && cl.adoptOnly:
		return adopted
	case svc.Spec.LoadBalancerClass == nil && cl.defaultClass:
		return ours
	case svc.Spec.LoadBalancerClass != nil && *svc.Spec.LoadBalancerClass == mooringv1.LoadBalancerClass:
		return ours
	}
	return foreignClass
}

// heldAddrs returns the IPs in status.loadBalancer.ingress, whoever wrote
// them; entries that are not IPs (hostnames, garbage) are skipped.
func heldAddrs(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

// toService converts a Service and its namespace's labels. A non-nil error
// means the Service's own request is unusable (e.g. a malformed
// mooring.dev/ips): the returned Service then carries only what it holds,
// so the core can keep those addresses while nothing new is allocated.
func toService(svc *corev1.Service, nsLabels map[string]string) (lbipam.Service, error) {
	s := lbipam.Service{
		Key:             serviceKey(svc),
		Labels:          svc.Labels,
		NamespaceLabels: nsLabels,
		Held:            heldAddrs(svc),
	}
	s.Families, s.RequireAllFamilies = families(svc)
	for _, p := range svc.Spec.Ports {
		s.Ports = append(s.Ports, lbipam.Port{Protocol: string(p.Protocol), Port: p.Port})
	}
	s.SharingBackend = sharingBackend(svc)
	key, nss, errShare := sharing(svc.Annotations)
	pools, errPools := poolsAnnotation(svc.Annotations)
	req, errReq := requested(svc)
	if err := errors.Join(errReq, errPools, errShare); err != nil {
		// Keep the sharing key when it parsed: held addresses are imported
		// with it, so the Services sharing them stay compatible.
		s.SharingKey, s.SharingNamespaces = key, nss
		return s, err
	}
	s.SharingKey, s.SharingNamespaces, s.Pools, s.Requested = key, nss, pools, req
	return s, nil
}

// families maps spec.ipFamilies and spec.ipFamilyPolicy onto the core's
// request: PreferDualStack requires only the first family.
func families(svc *corev1.Service) ([]lbipam.Family, bool) {
	var fams []lbipam.Family
	for _, f := range svc.Spec.IPFamilies {
		switch f {
		case corev1.IPv4Protocol:
			fams = append(fams, lbipam.IPv4)
		case corev1.IPv6Protocol:
			fams = append(fams, lbipam.IPv6)
		}
	}
	policy := corev1.IPFamilyPolicySingleStack
	if svc.Spec.IPFamilyPolicy != nil {
		policy = *svc.Spec.IPFamilyPolicy
	}
	if policy == corev1.IPFamilyPolicySingleStack && len(fams) > 1 {
		fams = fams[:1]
	}
	return fams, policy != corev1.IPFamilyPolicyPreferDualStack
}

// requested merges the requested-addresses annotation (annotations.go)
// with spec.loadBalancerIP (deprecated upstream, still what many charts set).
func requested(svc *corev1.Service) ([]netip.Addr, error) {
	out, err := requestedAnnotation(svc.Annotations)
	if err != nil {
		return nil, err
	}
	if lbip := strings.TrimSpace(svc.Spec.LoadBalancerIP); lbip != "" {
		a, err := netip.ParseAddr(lbip)
		if err != nil {
			return nil, fmt.Errorf("spec.loadBalancerIP %q is not an IP address: set one address such as 192.0.2.10, or use the %s annotation", lbip, mooringv1.AnnotationIPs)
		}
		a = a.Unmap()
		dup := false
		for _, o := range out {
			dup = dup || o == a
		}
		if !dup {
			out = append(out, a)
		}
	}
	return out, nil
}

// poolInput is a pool converted for the core, plus the problems the
// conversion found, which go into the pool's status.
type poolInput struct {
	pool          lbipam.Pool
	invalidBlocks []string // blocks that did not parse; left out of pool
	selectorError string   // a selector did not parse; the pool selects nothing
}

// toPool converts a pool. Nothing here fails: an unparsable block is left
// out and reported, an unparsable selector makes the pool match nothing.
func toPool(p *mooringv1.LoadBalancerIPPool) poolInput {
	in := poolInput{pool: lbipam.Pool{
		Name:              p.Name,
		Created:           p.CreationTimestamp.Time,
		Priority:          p.Spec.Priority,
		Disabled:          p.Spec.Disabled,
		AllowFirstLastIPs: p.Spec.AllowFirstLastIPs,
		ManualOnly:        p.Spec.AutoAssign != nil && !*p.Spec.AutoAssign,
		AvoidBuggyIPs:     p.Spec.AvoidBuggyIPs,
		Namespaces:        p.Spec.Namespaces,
	}}
	for i, b := range p.Spec.Blocks {
		var blk lbipam.Block
		var err error
		if b.CIDR != "" {
			blk, err = lbipam.ParseCIDRBlock(b.CIDR)
		} else {
			// A reversed or mixed range goes to the core, which reports it
			// by family (admission cannot order IPv6 addresses).
			blk, err = lbipam.ParseRangeEnds(b.Start, b.Stop)
		}
		if err != nil {
			in.invalidBlocks = append(in.invalidBlocks, fmt.Sprintf("spec.blocks[%d]: %v", i, err))
			continue
		}
		blk.Index = i
		in.pool.Blocks = append(in.pool.Blocks, blk)
	}
	var errs []string
	in.pool.ServiceSelector, errs = toSelector("serviceSelector", p.Spec.ServiceSelector, errs)
	in.pool.NamespaceSelector, errs = toSelector("namespaceSelector", p.Spec.NamespaceSelector, errs)
	for i, t := range p.Spec.SelectorTerms {
		term := lbipam.Term{Namespaces: t.Namespaces}
		term.ServiceSelector, errs = toSelector(fmt.Sprintf("selectorTerms[%d].serviceSelector", i), t.ServiceSelector, errs)
		term.NamespaceSelector, errs = toSelector(fmt.Sprintf("selectorTerms[%d].namespaceSelector", i), t.NamespaceSelector, errs)
		in.pool.Terms = append(in.pool.Terms, term)
	}
	in.selectorError = strings.Join(errs, "; ")
	return in
}

// toSelector returns nil (match all) for an absent or empty selector, and a
// selector matching nothing when it does not parse, so a typo never widens
// a pool to every Service.
func toSelector(field string, ls *metav1.LabelSelector, errs []string) (lbipam.Selector, []string) {
	if ls == nil || (len(ls.MatchLabels) == 0 && len(ls.MatchExpressions) == 0) {
		return nil, errs
	}
	sel, err := metav1.LabelSelectorAsSelector(ls)
	if err != nil {
		return labelSelector{labels.Nothing()}, append(errs, fmt.Sprintf("%s: %v: fix the selector; until then the pool hands out nothing", field, err))
	}
	return labelSelector{sel}, errs
}

// labelSelector adapts a labels.Selector to lbipam.Selector.
type labelSelector struct{ sel labels.Selector }

func (s labelSelector) Matches(l map[string]string) bool { return s.sel.Matches(labels.Set(l)) }
