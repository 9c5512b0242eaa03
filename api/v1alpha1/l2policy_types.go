package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// L2AnnouncementPolicySpec says which Services' addresses are announced on
// the local segment, from which nodes and on which interfaces.
type L2AnnouncementPolicySpec struct {
	// ServiceSelector picks the Services whose addresses are announced.
	// Empty or absent matches every Service.
	//
	// +optional
	ServiceSelector *metav1.LabelSelector `json:"serviceSelector,omitempty"`

	// NodeSelector picks the nodes that may announce. Empty or absent matches
	// every node.
	//
	// +optional
	NodeSelector *metav1.LabelSelector `json:"nodeSelector,omitempty"`

	// Interfaces are regular expressions (RE2, anchored at both ends) for the
	// names of the interfaces to answer on, e.g. ["eth0", "enp.*"]. Empty means
	// every interface of the node except loopback.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Interfaces []string `json:"interfaces,omitempty"`

	// LoadBalancerIPs announces the Services' status.loadBalancer.ingress
	// addresses.
	//
	// +optional
	// +kubebuilder:default=true
	LoadBalancerIPs *bool `json:"loadBalancerIPs,omitempty"`

	// ExternalIPs announces the Services' spec.externalIPs.
	//
	// +optional
	ExternalIPs bool `json:"externalIPs,omitempty"`

	// Ranking orders the nodes that may announce an address, so it picks
	// the owner and the order of stand-ins. Mooring (the default) is
	// Mooring's rendezvous hash. MetalLB orders them exactly as MetalLB's
	// layer-2 speaker does (the smallest sha256 of "node#address" first):
	// during a migration off MetalLB every address stays on the node
	// MetalLB chose, so no connection is reset. `mooring import metallb`
	// sets it. Changing it moves addresses.
	//
	// +optional
	// +kubebuilder:default=Mooring
	Ranking L2Ranking `json:"ranking,omitempty"`
}

// L2Ranking names how candidate nodes are ordered for an address.
//
// +kubebuilder:validation:Enum=Mooring;MetalLB
type L2Ranking string

const (
	// L2RankingMooring is Mooring's rendezvous hash.
	L2RankingMooring L2Ranking = "Mooring"
	// L2RankingMetalLB is MetalLB's layer-2 speaker's order.
	L2RankingMetalLB L2Ranking = "MetalLB"
)

// L2AnnouncementPolicyStatus is what the agents observed about the policy.
type L2AnnouncementPolicyStatus struct {
	// Conditions: Ready, InvalidSpec.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status describes.
	//
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// L2AnnouncementPolicy makes the agents answer ARP and NDP for the addresses
// of the Services it selects.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=l2policy;l2policies,categories=mooring
// +kubebuilder:printcolumn:name="LB IPs",type=boolean,JSONPath=`.spec.loadBalancerIPs`
// +kubebuilder:printcolumn:name="External IPs",type=boolean,JSONPath=`.spec.externalIPs`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type L2AnnouncementPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   L2AnnouncementPolicySpec   `json:"spec,omitempty"`
	Status L2AnnouncementPolicyStatus `json:"status,omitempty"`
}

// L2AnnouncementPolicyList is a list of L2AnnouncementPolicy.
//
// +kubebuilder:object:root=true
type L2AnnouncementPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []L2AnnouncementPolicy `json:"items"`
}
