package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func init() { SchemeBuilder.Register(addPodIPAMTypes) }

func addPodIPAMTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&PodIPPool{}, &PodIPPoolList{},
		&PodIPAMNode{}, &PodIPAMNodeList{},
	)
	return nil
}

// Names for pod IPAM that Mooring reads from objects it does not own.
const (
	// AnnotationPodIPPool on a namespace picks the PodIPPool of its pods; on
	// a pod it overrides the namespace's. Without either: the pool "default".
	AnnotationPodIPPool = "mooring.dev/pod-ip-pool"
	// DefaultPodIPPool is the pool of pods that name none.
	DefaultPodIPPool = "default"
	// ConditionPodCIDRMismatch is the Node condition (and PodIPAMNode
	// condition) set in cluster-pool mode when node.spec.podCIDRs is set and
	// differs from Mooring's block.
	ConditionPodCIDRMismatch = "MooringPodCIDRMismatch"
	// ConditionCIDRsInUse says CIDRs removed from a pool are still held by
	// nodes; they stay reserved until those nodes release them.
	ConditionCIDRsInUse = "CIDRsInUse"
	// ConditionExhausted says a node asked for a block the pool cannot give.
	ConditionExhausted = "Exhausted"
	// ConditionNodeDeleted on a PodIPAMNode: its Node was deleted, and its
	// blocks stay reserved while pods still have addresses from them.
	ConditionNodeDeleted = "NodeDeleted"
)

// PodIPPoolFamily is one IP family of a PodIPPool: the CIDRs blocks are cut
// from and the size of each node's block.
//
// +kubebuilder:validation:XValidation:rule="self.cidrs.all(c, !isCIDR(c) || cidr(c).prefixLength() <= self.maskSize)",message="maskSize must be at least the prefix length of every CIDR (a node's block is cut from a CIDR): raise maskSize or use a larger CIDR"
type PodIPPoolFamily struct {
	// CIDRs are the networks blocks are cut from. CIDRs of one pool, and of
	// different pools, must not overlap.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=49
	// +kubebuilder:validation:items:XValidation:rule="isCIDR(self)",message="each cidr must be a network in CIDR notation, such as 10.244.0.0/16 or fd00:10:244::/56"
	// +kubebuilder:validation:items:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="cidr has bits set after its prefix length: write the network address (e.g. 10.244.0.0/16, not 10.244.3.0/16)"
	CIDRs []string `json:"cidrs"`

	// MaskSize is the prefix length of each node's block, e.g. 24 (254 pods)
	// or 26 (62 pods) for IPv4, 120 for IPv6.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=128
	MaskSize int32 `json:"maskSize"`
}

// PodIPPoolSpec has the same shape as Cilium's CiliumPodIPPool, so an
// import maps one to one.
//
// +kubebuilder:validation:XValidation:rule="has(self.ipv4) || has(self.ipv6)",message="a pool needs ipv4, ipv6 or both, e.g. ipv4: {cidrs: [10.250.0.0/16], maskSize: 26}"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 4)",message="ipv4.cidrs must be IPv4 networks: move IPv6 ones to ipv6.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || self.ipv6.cidrs.all(c, !isCIDR(c) || cidr(c).ip().family() == 6)",message="ipv6.cidrs must be IPv6 networks: move IPv4 ones to ipv4.cidrs"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv4) || self.ipv4.maskSize <= 32",message="ipv4.maskSize must be at most 32 (e.g. 24 or 26)"
// +kubebuilder:validation:XValidation:rule="!has(self.ipv6) || self.ipv6.maskSize <= 128",message="ipv6.maskSize must be at most 128 (e.g. 120)"
type PodIPPoolSpec struct {
	// IPv4 is the pool's IPv4 part.
	//
	// +optional
	IPv4 *PodIPPoolFamily `json:"ipv4,omitempty"`
	// IPv6 is the pool's IPv6 part.
	//
	// +optional
	IPv6 *PodIPPoolFamily `json:"ipv6,omitempty"`
}

// PodIPPoolFamilyStatus counts one family of a pool. Counts are integers:
// blocks are few, and addresses are capped at 2^62.
type PodIPPoolFamilyStatus struct {
	// Blocks is how many blocks nodes hold.
	Blocks int64 `json:"blocks"`
	// Capacity is how many blocks the pool's CIDRs hold in all.
	Capacity int64 `json:"capacity"`
	// Addresses is how many pod addresses the held blocks hold.
	Addresses int64 `json:"addresses"`
}

// PodIPPoolStatus is what the controller observed about the pool.
type PodIPPoolStatus struct {
	// Conditions: Ready, Conflicting, CIDRsInUse, Exhausted.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// IPv4 and IPv6 count the pool's blocks per family.
	//
	// +optional
	IPv4 *PodIPPoolFamilyStatus `json:"ipv4,omitempty"`
	// +optional
	IPv6 *PodIPPoolFamilyStatus `json:"ipv6,omitempty"`
	// Nodes is how many nodes hold a block of the pool.
	//
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// ObservedGeneration is the spec generation the status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// PodIPPool is a set of CIDRs that per-node pod address blocks are cut from
// (pod IPAM mode multi-pool). A namespace annotation mooring.dev/pod-ip-pool
// picks the pool of its pods; without one, pods use the pool "default".
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=podpool;podpools,categories=mooring
// +kubebuilder:printcolumn:name="V4 CIDRs",type=string,JSONPath=`.spec.ipv4.cidrs`
// +kubebuilder:printcolumn:name="V4 Mask",type=integer,JSONPath=`.spec.ipv4.maskSize`
// +kubebuilder:printcolumn:name="V6 CIDRs",type=string,JSONPath=`.spec.ipv6.cidrs`,priority=1
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="V4 Blocks",type=integer,JSONPath=`.status.ipv4.blocks`
// +kubebuilder:printcolumn:name="V6 Blocks",type=integer,JSONPath=`.status.ipv6.blocks`
// +kubebuilder:printcolumn:name="Conflicting",type=string,JSONPath=`.status.conditions[?(@.type=="Conflicting")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodIPPoolSpec   `json:"spec"`
	Status PodIPPoolStatus `json:"status,omitempty"`
}

// PodIPPoolList is a list of PodIPPool.
//
// +kubebuilder:object:root=true
type PodIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodIPPool `json:"items"`
}
