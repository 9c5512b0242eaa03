package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPAdvertisementSpec says which Services' addresses the agents advertise
// over BGP, from which nodes, to which peers and with which attributes.
// Field names follow MetalLB's BGPAdvertisement where the meaning is the
// same (pools is its ipAddressPools, poolSelectors its
// ipAddressPoolSelectors). An address is advertised by every advertisement
// that selects it; prefixes and attributes of several advertisements are
// merged per peer (communities united, the highest localPref kept).
type BGPAdvertisementSpec struct {
	// Pools names LoadBalancerIPPools whose addresses are advertised. With
	// poolSelectors empty too: every pool.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Pools []string `json:"pools,omitempty"`

	// PoolSelectors pick pools by their labels: a pool matching any of
	// them (or named in pools).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	PoolSelectors []metav1.LabelSelector `json:"poolSelectors,omitempty"`

	// ServiceSelectors pick Services by their labels (and the virtual
	// labels mooring.dev/service-namespace and mooring.dev/service-name): a
	// Service matching any of them. Empty: every Service.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	ServiceSelectors []metav1.LabelSelector `json:"serviceSelectors,omitempty"`

	// NamespaceSelectors pick Services by the labels of their namespace: a
	// namespace matching any of them. Empty: every namespace.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	NamespaceSelectors []metav1.LabelSelector `json:"namespaceSelectors,omitempty"`

	// NodeSelectors pick the nodes that advertise: a node matching any of
	// them. Empty: every node that has a session with a selected peer. With
	// externalTrafficPolicy: Local only nodes with a ready endpoint of the
	// Service advertise it; with Cluster every selected node does (ECMP at
	// the router).
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// Peers names the BGPPeers that receive the prefixes. Empty: every peer.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=set
	Peers []string `json:"peers,omitempty"`

	// AggregationLength is the prefix length IPv4 addresses are advertised
	// with: 32 (default) advertises each address; a shorter length
	// advertises the covering network once, until its last advertised
	// address goes. It must not be shorter than any CIDR block of a
	// selected pool (the aggregate would cover addresses outside it).
	//
	// +optional
	// +kubebuilder:default=32
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=32
	AggregationLength *int32 `json:"aggregationLength,omitempty"`

	// AggregationLengthV6 is the same for IPv6 addresses. Default 128.
	//
	// +optional
	// +kubebuilder:default=128
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=128
	AggregationLengthV6 *int32 `json:"aggregationLengthV6,omitempty"`

	// LocalPref is the LOCAL_PREF attribute sent to iBGP peers (eBGP peers
	// never receive it, RFC 4271). Absent: none is set.
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967295
	LocalPref *int64 `json:"localPref,omitempty"`

	// Communities are attached to the prefixes: a standard community
	// "65000:100" (two 16-bit numbers), a large community
	// "large:65000:1:2" (three 32-bit numbers), or the name of an alias in
	// a BGPCommunity.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=80
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,5}:[0-9]{1,5}$') ? self.split(':').all(p, int(p) <= 65535) : true",message="a standard community is two numbers 0-65535, e.g. 65000:100"
	// +kubebuilder:validation:items:XValidation:rule="self.startsWith('large:') ? (self.matches('^large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$') && self.split(':').all(p, p == 'large' || int(p) <= 4294967295)) : true",message="a large community is large:A:B:C with three numbers 0-4294967295, e.g. large:65000:1:2"
	// +kubebuilder:validation:items:XValidation:rule="self.matches('^[0-9]{1,5}:[0-9]{1,5}$') || self.startsWith('large:') || self.matches('^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$')",message="a community is 65000:100, large:65000:1:2 or the name of a BGPCommunity alias (lower-case letters, digits, '-' and '.')"
	// +listType=atomic
	Communities []string `json:"communities,omitempty"`

	// LoadBalancerIPs advertises the Services' status.loadBalancer.ingress
	// addresses. Default true.
	//
	// +optional
	// +kubebuilder:default=true
	LoadBalancerIPs *bool `json:"loadBalancerIPs,omitempty"`

	// ExternalIPs advertises the Services' spec.externalIPs.
	//
	// +optional
	ExternalIPs bool `json:"externalIPs,omitempty"`
}

// BGPAdvertisementStatus is written by the agents' status writer when the
// spec changes.
type BGPAdvertisementStatus struct {
	// Conditions: Ready, InvalidSpec (what admission could not check: an
	// unknown community alias, an aggregation length shorter than a pool's
	// block, a bad selector). An invalid advertisement advertises nothing;
	// the others are unaffected.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the conditions describe.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// BGPAdvertisement makes the agents advertise the addresses of the
// Services it selects to BGP peers.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bgpadv;bgpadvs,categories=mooring
// +kubebuilder:printcolumn:name="Pools",type=string,JSONPath=`.spec.pools`
// +kubebuilder:printcolumn:name="Peers",type=string,JSONPath=`.spec.peers`
// +kubebuilder:printcolumn:name="Agg v4",type=integer,JSONPath=`.spec.aggregationLength`
// +kubebuilder:printcolumn:name="Agg v6",type=integer,JSONPath=`.spec.aggregationLengthV6`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPAdvertisement struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BGPAdvertisementSpec   `json:"spec,omitempty"`
	Status BGPAdvertisementStatus `json:"status,omitempty"`
}

// BGPAdvertisementList is a list of BGPAdvertisement.
//
// +kubebuilder:object:root=true
type BGPAdvertisementList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPAdvertisement `json:"items"`
}

// BGPCommunityAlias is one named community value.
type BGPCommunityAlias struct {
	// Name is what advertisements write instead of the value.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	Name string `json:"name"`

	// Value is a standard community "65000:100" or a large one
	// "large:65000:1:2".
	//
	// +kubebuilder:validation:MaxLength=40
	// +kubebuilder:validation:XValidation:rule="self.matches('^[0-9]{1,5}:[0-9]{1,5}$') ? self.split(':').all(p, int(p) <= 65535) : (self.matches('^large:[0-9]{1,10}:[0-9]{1,10}:[0-9]{1,10}$') && self.split(':').all(p, p == 'large' || int(p) <= 4294967295))",message="value must be a standard community (two numbers 0-65535, e.g. 65000:100) or a large one (large:A:B:C, three numbers 0-4294967295)"
	Value string `json:"value"`
}

// BGPCommunitySpec holds community aliases (MetalLB's Community).
type BGPCommunitySpec struct {
	// Communities are the aliases. A name must be unique across every
	// BGPCommunity; a duplicate is reported on the advertisements using
	// it.
	//
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=name
	Communities []BGPCommunityAlias `json:"communities"`
}

// BGPCommunity names community values, so advertisements can say
// "no-export-upstream" instead of 65000:666.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bgpcommunity,categories=mooring
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPCommunity struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BGPCommunitySpec `json:"spec"`
}

// BGPCommunityList is a list of BGPCommunity.
//
// +kubebuilder:object:root=true
type BGPCommunityList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPCommunity `json:"items"`
}

// BFDProfileSpec is a BFD (RFC 5880) session's timing. The agent runs
// single-hop asynchronous BFD; echo mode, passive mode and a minimum TTL
// (MetalLB's echoMode, echoInterval, passiveMode, minimumTtl) are not
// supported and `mooring import metallb` reports them.
type BFDProfileSpec struct {
	// ReceiveInterval is the minimum interval between received BFD
	// packets this node asks for, in milliseconds, 10-60000. Default 300.
	//
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	ReceiveInterval *int32 `json:"receiveInterval,omitempty"`

	// TransmitInterval is the minimum interval between sent BFD packets,
	// in milliseconds, 10-60000. Default 300.
	//
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=60000
	TransmitInterval *int32 `json:"transmitInterval,omitempty"`

	// DetectMultiplier is how many packets may be missed before the
	// session is declared down, 2-255. Default 3: with 300 ms a dead
	// router (or node, at the router) is detected in about 900 ms.
	//
	// +optional
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=2
	// +kubebuilder:validation:Maximum=255
	DetectMultiplier *int32 `json:"detectMultiplier,omitempty"`
}

// BFDProfile is a set of BFD timers peers refer to by name.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=bfdprofile,categories=mooring
// +kubebuilder:printcolumn:name="Receive (ms)",type=integer,JSONPath=`.spec.receiveInterval`
// +kubebuilder:printcolumn:name="Transmit (ms)",type=integer,JSONPath=`.spec.transmitInterval`
// +kubebuilder:printcolumn:name="Multiplier",type=integer,JSONPath=`.spec.detectMultiplier`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BFDProfile struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BFDProfileSpec `json:"spec,omitempty"`
}

// BFDProfileList is a list of BFDProfile.
//
// +kubebuilder:object:root=true
type BFDProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BFDProfile `json:"items"`
}
