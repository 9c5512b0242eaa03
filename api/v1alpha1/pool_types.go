package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// IPBlock is one block of addresses: a CIDR, or an inclusive start/stop range.
//
// Admission rejects an IPv4 range whose start is after its stop, but not an
// IPv6 one: Kubernetes' CEL has no ordering of IP addresses, and a rule that
// expands both IPv6 texts to compare them exceeds the CRD's CEL cost budget
// by more than 100x. The controller reports such a block in the pool's
// InvalidBlocks condition and READY shows False.
//
// Admission also refuses what can never be a Service address (the same
// list as lbipam's unusable, which the controller applies to pools admitted
// before these rules): a /0, blocks containing unspecified (0.0.0.0/8, ::),
// loopback, link-local, multicast or the limited broadcast address, and
// IPv6 blocks spanning more than one /48 (docs/lbipam.md says why).
//
// +kubebuilder:validation:XValidation:rule="has(self.cidr) ? !has(self.start) && !has(self.stop) : has(self.start) && has(self.stop)",message="a block is either a cidr (e.g. 192.0.2.0/24) or a start and a stop address (e.g. start: 192.0.2.10, stop: 192.0.2.20): set exactly one form"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !has(self.stop) || !isIP(self.start) || !isIP(self.stop) || ip(self.start).family() == ip(self.stop).family()",message="start and stop must be of the same IP family: a range cannot mix IPv4 and IPv6; use one block per family"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !has(self.stop) || !isIP(self.start) || !isIP(self.stop) || ip(self.start).family() != 4 || ip(self.stop).family() != 4 || (int(self.start.split('.')[0]) * 16777216 + int(self.start.split('.')[1]) * 65536 + int(self.start.split('.')[2]) * 256 + int(self.start.split('.')[3])) <= (int(self.stop.split('.')[0]) * 16777216 + int(self.stop.split('.')[1]) * 65536 + int(self.stop.split('.')[2]) * 256 + int(self.stop.split('.')[3]))",message="start must not be greater than stop: swap them"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !has(self.stop) || !isIP(self.start) || !isIP(self.stop) || ip(self.start).family() != 4 || ip(self.stop).family() != 4 || !((int(self.start.split('.')[0]) <= 127 && int(self.stop.split('.')[0]) >= 127) || (int(self.start.split('.')[0]) * 256 + int(self.start.split('.')[1]) <= 43518 && int(self.stop.split('.')[0]) * 256 + int(self.stop.split('.')[1]) >= 43518) || (int(self.start.split('.')[0]) <= 239 && int(self.stop.split('.')[0]) >= 224))",message="the range includes loopback (127.0.0.0/8), link-local (169.254.0.0/16) or multicast (224.0.0.0/4) addresses, which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
// +kubebuilder:validation:XValidation:rule="!has(self.start) || !has(self.stop) || !isIP(self.start) || !isIP(self.stop) || ip(self.start).family() != 6 || ip(self.stop).family() != 6 || cidr(self.start + '/48').masked().containsIP(self.stop)",message="an IPv6 range may span at most one /48, a whole site's allocation (docs/lbipam.md says why): use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
type IPBlock struct {
	// CIDR is a network such as 192.0.2.0/24 or 2001:db8:1::/64. The first and
	// last address are not handed out unless the pool sets allowFirstLastIPs,
	// except in /32, /31, /128 and /127 blocks.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=49
	// +kubebuilder:validation:XValidation:rule="isCIDR(self)",message="cidr must be a network in CIDR notation, such as 192.0.2.0/24 or 2001:db8::/64"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self) == cidr(self).masked()",message="cidr has bits set after its prefix length: write the network address (e.g. 192.0.2.0/24, not 192.0.2.7/24)"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() != 0",message="a /0 block is every address of its family, the nodes' own, loopback and multicast included: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || !(cidr(self).containsIP('0.0.0.0') || cidr('0.0.0.0/8').containsIP(cidr(self).ip()) || cidr(self).containsIP('::'))",message="cidr contains the unspecified address (0.0.0.0/8 or ::), which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || !(cidr(self).containsIP('127.0.0.0') || cidr('127.0.0.0/8').containsIP(cidr(self).ip()) || cidr(self).containsIP('::1'))",message="cidr contains loopback addresses (127.0.0.0/8 or ::1), which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || !(cidr(self).containsIP('169.254.0.0') || cidr('169.254.0.0/16').containsIP(cidr(self).ip()) || cidr(self).containsIP('fe80::') || cidr('fe80::/10').containsIP(cidr(self).ip()))",message="cidr contains link-local addresses (169.254.0.0/16 or fe80::/10), which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || !(cidr(self).containsIP('224.0.0.0') || cidr('224.0.0.0/4').containsIP(cidr(self).ip()) || cidr(self).containsIP('ff00::') || cidr('ff00::/8').containsIP(cidr(self).ip()))",message="cidr contains multicast addresses (224.0.0.0/4 or ff00::/8), which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || !(cidr(self).containsIP('255.255.255.255'))",message="cidr contains the limited broadcast address 255.255.255.255, which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	// +kubebuilder:validation:XValidation:rule="!isCIDR(self) || cidr(self).prefixLength() == 0 || cidr(self).ip().family() != 6 || cidr(self).prefixLength() >= 48",message="an IPv6 block may span at most one /48, a whole site's allocation (docs/lbipam.md says why): use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	CIDR string `json:"cidr,omitempty"`

	// Start is the first address of an inclusive range.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="start must be a single IPv4 or IPv6 address, such as 192.0.2.10 or 2001:db8::10"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || !(cidr('0.0.0.0/8').containsIP(self) || cidr('127.0.0.0/8').containsIP(self) || cidr('169.254.0.0/16').containsIP(self) || cidr('224.0.0.0/4').containsIP(self) || cidr('255.255.255.255/32').containsIP(self) || cidr('::/128').containsIP(self) || cidr('::1/128').containsIP(self) || cidr('fe80::/10').containsIP(self) || cidr('ff00::/8').containsIP(self))",message="start is an unspecified, loopback, link-local, multicast or broadcast address, which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	Start string `json:"start,omitempty"`

	// Stop is the last address of an inclusive range.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="stop must be a single IPv4 or IPv6 address, such as 192.0.2.20 or 2001:db8::20"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || !(cidr('0.0.0.0/8').containsIP(self) || cidr('127.0.0.0/8').containsIP(self) || cidr('169.254.0.0/16').containsIP(self) || cidr('224.0.0.0/4').containsIP(self) || cidr('255.255.255.255/32').containsIP(self) || cidr('::/128').containsIP(self) || cidr('::1/128').containsIP(self) || cidr('fe80::/10').containsIP(self) || cidr('ff00::/8').containsIP(self))",message="stop is an unspecified, loopback, link-local, multicast or broadcast address, which can never be a Service address: use addresses of the nodes' network set aside for Services, e.g. 192.0.2.0/24 or 2001:db8:1::/112"
	Stop string `json:"stop,omitempty"`
}

// LoadBalancerIPPoolSpec says which addresses the pool holds and which
// Services may take them.
type LoadBalancerIPPoolSpec struct {
	// Blocks are the pool's addresses. Blocks of one pool must not overlap.
	//
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Blocks []IPBlock `json:"blocks"`

	// Disabled stops the pool from handing out new addresses. Services that
	// already hold one of its addresses keep it.
	//
	// +optional
	// +kubebuilder:default=false
	Disabled bool `json:"disabled,omitempty"`

	// AllowFirstLastIPs lets the first and last address of each CIDR block be
	// handed out too.
	//
	// +optional
	AllowFirstLastIPs bool `json:"allowFirstLastIPs,omitempty"`

	// AutoAssign false keeps the pool for Services that ask for it: only a
	// Service that requests one of its addresses or names the pool (the
	// mooring.dev/pool annotation) gets an address from it. Default true.
	// Same meaning as MetalLB's IPAddressPool autoAssign.
	//
	// +optional
	// +kubebuilder:default=true
	AutoAssign *bool `json:"autoAssign,omitempty"`

	// AvoidBuggyIPs never hands out an IPv4 address ending in .0 or .255:
	// the first and last address of every /24 inside each block, whatever
	// the block's own size (MetalLB's avoidBuggyIPs). It also refuses such
	// an address when a Service requests it. No effect on IPv6.
	//
	// +optional
	AvoidBuggyIPs bool `json:"avoidBuggyIPs,omitempty"`

	// ServiceSelector picks the Services this pool serves. Besides a Service's
	// own labels it can match mooring.dev/service-namespace and
	// mooring.dev/service-name. Empty or absent matches every Service.
	//
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`

	// NamespaceSelector picks Services by the labels of their namespace.
	// Empty or absent matches every namespace.
	//
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// Namespaces restricts the pool to Services in these namespaces (on top
	// of the selectors). Empty or absent: every namespace. MetalLB's
	// serviceAllocation.namespaces.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// SelectorTerms, when set, restricts the pool to Services that match at
	// least one term: the terms are ORed, and within a term every field
	// that is set must match. serviceSelector, namespaceSelector and
	// namespaces above still apply on top. One selector cannot say MetalLB's
	// serviceAllocation rule (namespaces listed OR selected by any of
	// several namespaceSelectors, AND any of several serviceSelectors);
	// terms can, one per (namespace rule, service selector) pair, and
	// `mooring import metallb` writes them so.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=64
	SelectorTerms []PoolSelectorTerm `json:"selectorTerms,omitempty"`

	// Priority orders pools when several match a Service: the LOWER number
	// is tried first (as MetalLB's serviceAllocation.priority); pools without
	// a priority come after every pool with one. Among equals the older pool
	// comes first, then by name.
	//
	// +optional
	Priority *int32 `json:"priority,omitempty"`
}

// PoolSelectorTerm is one way a Service may match a pool (see
// selectorTerms): every field that is set must match.
//
// +kubebuilder:validation:XValidation:rule="has(self.namespaces) || has(self.namespaceSelector) || has(self.serviceSelector)",message="a selector term must set namespaces, namespaceSelector or serviceSelector (an empty term would match every Service: leave selectorTerms out instead)"
type PoolSelectorTerm struct {
	// Namespaces: the Service is in one of these namespaces.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=63
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Namespaces []string `json:"namespaces,omitempty"`

	// NamespaceSelector matches the labels of the Service's namespace.
	//
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`

	// ServiceSelector matches the Service's labels, plus
	// mooring.dev/service-namespace and mooring.dev/service-name.
	//
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`
}

// FamilyUsage counts a pool's addresses of one IP family. Counts are decimal
// strings because an IPv6 pool can hold more than 2^63 addresses.
type FamilyUsage struct {
	// Total is how many addresses the pool can hand out.
	Total string `json:"total"`
	// Used is how many are held by Services.
	Used string `json:"used"`
	// Free is Total minus Used.
	Free string `json:"free"`
}

// LoadBalancerIPPoolStatus is what the controller observed about the pool.
type LoadBalancerIPPoolStatus struct {
	// Conditions: Ready, Conflicting, InvalidBlocks.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// IPv4 counts the pool's IPv4 addresses.
	//
	// +optional
	IPv4 *FamilyUsage `json:"ipv4,omitempty"`

	// IPv6 counts the pool's IPv6 addresses.
	//
	// +optional
	IPv6 *FamilyUsage `json:"ipv6,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// LoadBalancerIPPool is a set of addresses that Services of type LoadBalancer
// are given addresses from.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=lbpool;lbpools,categories=mooring
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Disabled",type=boolean,JSONPath=`.spec.disabled`
// +kubebuilder:printcolumn:name="Conflicting",type=string,JSONPath=`.status.conditions[?(@.type=="Conflicting")].status`
// +kubebuilder:printcolumn:name="V4 Used",type=string,JSONPath=`.status.ipv4.used`
// +kubebuilder:printcolumn:name="V4 Free",type=string,JSONPath=`.status.ipv4.free`
// +kubebuilder:printcolumn:name="V6 Used",type=string,JSONPath=`.status.ipv6.used`
// +kubebuilder:printcolumn:name="V6 Free",type=string,JSONPath=`.status.ipv6.free`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type LoadBalancerIPPool struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   LoadBalancerIPPoolSpec   `json:"spec"`
	Status LoadBalancerIPPoolStatus `json:"status,omitempty"`
}

// LoadBalancerIPPoolList is a list of LoadBalancerIPPool.
//
// +kubebuilder:object:root=true
type LoadBalancerIPPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []LoadBalancerIPPool `json:"items"`
}
