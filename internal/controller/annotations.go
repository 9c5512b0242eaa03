package controller

// Request annotations: Mooring's own, and those of MetalLB and Cilium so
// that Services migrate without an edit. Per aspect (addresses, pools,
// sharing) Mooring's annotation wins outright; without it, every other
// system's annotation of that aspect that is set must agree, or the
// request is invalid (InvalidRequest: nothing new is assigned).

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// Other systems' request annotations, stable name first, then its twin.
const (
	annMetalLBIPs        = "metallb.io/loadBalancerIPs"
	annMetalLBIPsOld     = "metallb.universe.tf/loadBalancerIPs"
	annMetalLBPool       = "metallb.io/address-pool"
	annMetalLBPoolOld    = "metallb.universe.tf/address-pool"
	annMetalLBShared     = "metallb.io/allow-shared-ip"
	annMetalLBSharedOld  = "metallb.universe.tf/allow-shared-ip"
	annCiliumIPs         = "lbipam.cilium.io/ips"
	annCiliumIPsOld      = "io.cilium/lb-ipam-ips"
	annCiliumSharing     = "lbipam.cilium.io/sharing-key"
	annCiliumSharingOld  = "io.cilium/lb-ipam-sharing-key"
	annCiliumCrossNS     = "lbipam.cilium.io/sharing-cross-namespace"
	annCiliumCrossNSOld  = "io.cilium/lb-ipam-sharing-cross-namespace"
	annotationsPrecedent = "the mooring.dev/ annotation of the same kind wins over all of them"
)

var (
	foreignIPs     = []string{annMetalLBIPs, annMetalLBIPsOld, annCiliumIPs, annCiliumIPsOld}
	foreignPools   = []string{annMetalLBPool, annMetalLBPoolOld}
	metalLBSharing = []string{annMetalLBShared, annMetalLBSharedOld}
	ciliumSharing  = []string{annCiliumSharing, annCiliumSharingOld}
	ciliumCrossNS  = []string{annCiliumCrossNS, annCiliumCrossNSOld}
)

// setAnnotations returns the names of the annotations in names that svc
// sets to a non-blank value, in names order.
func setAnnotations(ann map[string]string, names []string) []string {
	var out []string
	for _, n := range names {
		if strings.TrimSpace(ann[n]) != "" {
			out = append(out, n)
		}
	}
	return out
}

// agreeing returns the parsed value of the first set annotation of names,
// or an error naming two that disagree (by equal).
func agreeing[T any](ann map[string]string, names []string, parse func(string) (T, error), equal func(a, b T) bool) (T, string, error) {
	var zero T
	set := setAnnotations(ann, names)
	if len(set) == 0 {
		return zero, "", nil
	}
	first, err := parse(ann[set[0]])
	if err != nil {
		return zero, "", fmt.Errorf("annotation %s=%q: %w", set[0], ann[set[0]], err)
	}
	for _, n := range set[1:] {
		v, err := parse(ann[n])
		if err != nil {
			return zero, "", fmt.Errorf("annotation %s=%q: %w", n, ann[n], err)
		}
		if !equal(first, v) {
			return zero, "", fmt.Errorf("annotations %s=%q and %s=%q contradict each other: remove one, or set the mooring.dev/ annotation, which wins (%s)",
				set[0], ann[set[0]], n, ann[n], annotationsPrecedent)
		}
	}
	return first, set[0], nil
}

func sameAddrSet(a, b []netip.Addr) bool {
	return len(a) == len(b) && !slices.ContainsFunc(a, func(x netip.Addr) bool { return !slices.Contains(b, x) })
}

// requestedAnnotation returns the addresses the annotations request.
func requestedAnnotation(ann map[string]string) ([]netip.Addr, error) {
	if raw, ok := ann[mooringv1.AnnotationIPs]; ok && strings.TrimSpace(raw) != "" {
		out, err := lbipam.ParseIPsAnnotation(raw)
		if err != nil {
			return nil, fmt.Errorf("annotation %s=%q: %w", mooringv1.AnnotationIPs, raw, err)
		}
		return out, nil
	}
	out, _, err := agreeing(ann, foreignIPs, lbipam.ParseIPsAnnotation, sameAddrSet)
	return out, err
}

// poolsAnnotation returns the pools the annotations restrict the Service to.
func poolsAnnotation(ann map[string]string) ([]string, error) {
	if raw := ann[mooringv1.AnnotationPool]; strings.TrimSpace(raw) != "" {
		return lbipam.ParsePoolsAnnotation(raw), nil
	}
	parse := func(s string) ([]string, error) { return lbipam.ParsePoolsAnnotation(s), nil }
	out, _, err := agreeing(ann, foreignPools, parse, slices.Equal[[]string])
	return out, err
}

// sharing returns the sharing key and the namespaces it may be shared
// with ("*": any). Mooring's key comes with mooring.dev/sharing-cross-namespace
// ("true" or "*": any namespace; else a comma-separated list). MetalLB's
// allow-shared-ip has no namespace limit (MetalLB shares across namespaces);
// Cilium's key comes with its own cross-namespace list. When MetalLB's and
// Cilium's keys are both set they must be equal, and Cilium's list applies.
func sharing(ann map[string]string) (string, []string, error) {
	if key := strings.TrimSpace(ann[mooringv1.AnnotationSharingKey]); key != "" {
		return key, parseNamespaces(ann[mooringv1.AnnotationSharingCrossNamespace]), nil
	}
	trim := func(s string) (string, error) { return strings.TrimSpace(s), nil }
	eq := func(a, b string) bool { return a == b }
	both := append(slices.Clone(metalLBSharing), ciliumSharing...)
	key, from, err := agreeing(ann, both, trim, eq)
	if err != nil || key == "" {
		return "", nil, err
	}
	nsParse := func(s string) ([]string, error) { return parseNamespaces(s), nil }
	list, _, err := agreeing(ann, ciliumCrossNS, nsParse, slices.Equal[[]string])
	if err != nil {
		return "", nil, err
	}
	if slices.Contains(metalLBSharing, from) && len(setAnnotations(ann, ciliumSharing)) == 0 {
		list = []string{"*"}
	}
	return key, list, nil
}

// parseNamespaces reads a cross-namespace opt-in: "true" or "*" is any
// namespace, "false" or blank none, anything else a comma-separated list.
func parseNamespaces(s string) []string {
	s = strings.TrimSpace(s)
	switch {
	case s == "":
		return nil
	case strings.EqualFold(s, "true") || s == "*":
		return []string{"*"}
	case strings.EqualFold(s, "false"):
		return nil
	}
	out := lbipam.ParsePoolsAnnotation(s) // same syntax: comma-separated names
	slices.Sort(out)
	return out
}

// sharingBackend is MetalLB's and Cilium's "backend key": Services with
// externalTrafficPolicy Local share an address only with Services that
// select the same pods, because one node must have endpoints for all.
func sharingBackend(svc *corev1.Service) string {
	if svc.Spec.ExternalTrafficPolicy != corev1.ServiceExternalTrafficPolicyLocal {
		return ""
	}
	return "local:" + labels.SelectorFromSet(svc.Spec.Selector).String()
}
