package importer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Mooring objects the importer writes. They mirror api/v1alpha1's JSON
// exactly (the round-trip test decodes them into the API types); the fields
// autoAssign, avoidBuggyIPs, namespaces, selectorTerms and priority are the
// ones the MetalLB mapping needs.

// APIVersion is the Mooring API version the importer writes.
const APIVersion = "mooring.dev/v1alpha1"

// AnnotationImportedFrom records where an imported object came from.
const AnnotationImportedFrom = "mooring.dev/imported-from"

// Meta is the metadata the importer sets.
type Meta struct {
	Name        string            `json:"name"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Block is one pool block: a CIDR, or start and stop.
type Block struct {
	CIDR  string `json:"cidr,omitempty"`
	Start string `json:"start,omitempty"`
	Stop  string `json:"stop,omitempty"`
}

// PoolSpec is LoadBalancerIPPoolSpec.
type PoolSpec struct {
	Blocks            []Block               `json:"blocks"`
	Disabled          bool                  `json:"disabled,omitempty"`
	AllowFirstLastIPs bool                  `json:"allowFirstLastIPs,omitempty"`
	AutoAssign        *bool                 `json:"autoAssign,omitempty"`
	AvoidBuggyIPs     bool                  `json:"avoidBuggyIPs,omitempty"`
	ServiceSelector   *metav1.LabelSelector `json:"serviceSelector,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	Namespaces        []string              `json:"namespaces,omitempty"`
	SelectorTerms     []SelectorTerm        `json:"selectorTerms,omitempty"`
	Priority          *int32                `json:"priority,omitempty"`
}

// SelectorTerm is PoolSelectorTerm: every field set must match; a pool's
// terms are ORed.
type SelectorTerm struct {
	Namespaces        []string              `json:"namespaces,omitempty"`
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	ServiceSelector   *metav1.LabelSelector `json:"serviceSelector,omitempty"`
}

// Pool is a LoadBalancerIPPool.
type Pool struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Metadata   Meta     `json:"metadata"`
	Spec       PoolSpec `json:"spec"`
}

// L2PolicySpec is L2AnnouncementPolicySpec.
type L2PolicySpec struct {
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`
	NodeSelector    *metav1.LabelSelector `json:"nodeSelector,omitempty"`
	Interfaces      []string              `json:"interfaces,omitempty"`
	LoadBalancerIPs *bool                 `json:"loadBalancerIPs,omitempty"`
	ExternalIPs     bool                  `json:"externalIPs,omitempty"`
	Ranking         string                `json:"ranking,omitempty"`
}

// L2Policy is an L2AnnouncementPolicy.
type L2Policy struct {
	APIVersion string       `json:"apiVersion"`
	Kind       string       `json:"kind"`
	Metadata   Meta         `json:"metadata"`
	Spec       L2PolicySpec `json:"spec"`
}

// Result is what an import produced.
type Result struct {
	Pools    []Pool
	Policies []L2Policy
	BGP      BGPObjects // out_bgp.go
	Report   Report
}

// Objects returns pools, policies, then the BGP objects, for printing.
func (r *Result) Objects() []any {
	out := make([]any, 0, len(r.Pools)+len(r.Policies))
	for i := range r.Pools {
		out = append(out, &r.Pools[i])
	}
	for i := range r.Policies {
		out = append(out, &r.Policies[i])
	}
	return append(out, r.BGP.objects()...)
}

func newPool(name, from string) Pool {
	return Pool{APIVersion: APIVersion, Kind: "LoadBalancerIPPool",
		Metadata: Meta{Name: name, Annotations: map[string]string{AnnotationImportedFrom: from}}}
}

func newPolicy(name, from string) L2Policy {
	return L2Policy{APIVersion: APIVersion, Kind: "L2AnnouncementPolicy",
		Metadata: Meta{Name: name, Annotations: map[string]string{AnnotationImportedFrom: from}}}
}

func ptr[T any](v T) *T { return &v }
