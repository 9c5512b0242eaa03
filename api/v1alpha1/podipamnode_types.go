package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// PodIPAMRequest is the agent's demand for one pool: how many addresses its
// node's blocks of that pool should hold per family (in use + pending +
// pre-allocation). Zero means none: the controller cuts nothing.
type PodIPAMRequest struct {
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Pool string `json:"pool"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	IPv4Addresses int32 `json:"ipv4Addresses,omitempty"`
	// +optional
	// +kubebuilder:validation:Minimum=0
	IPv6Addresses int32 `json:"ipv6Addresses,omitempty"`
}

// PodIPAMNodeSpec is written by the node's agent.
type PodIPAMNodeSpec struct {
	// Requests is the node's demand per pool (multi-pool mode).
	//
	// +optional
	// +listType=map
	// +listMapKey=pool
	// +kubebuilder:validation:MaxItems=64
	Requests []PodIPAMRequest `json:"requests,omitempty"`
	// Release lists blocks the agent stopped using and gives back; the
	// controller frees them and drops them from status.blocks.
	//
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=49
	Release []string `json:"release,omitempty"`
}

// PodIPAMBlock is one block handed to the node.
type PodIPAMBlock struct {
	// Pool is the PodIPPool the block was cut from ("" in cluster-pool mode).
	//
	// +optional
	Pool string `json:"pool,omitempty"`
	// CIDR is the block.
	//
	// +kubebuilder:validation:MaxLength=49
	CIDR string `json:"cidr"`
}

// PodIPAMNodeStatus is written by the controller.
type PodIPAMNodeStatus struct {
	// Mode is the cluster's pod IPAM mode the blocks were cut in.
	//
	// +optional
	Mode string `json:"mode,omitempty"`
	// Blocks are the node's blocks, in the order they were cut.
	//
	// +optional
	// +listType=atomic
	Blocks []PodIPAMBlock `json:"blocks,omitempty"`
	// Conditions: MooringPodCIDRMismatch, Exhausted, NodeDeleted.
	//
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// PodIPAMNode records the pod address blocks of one Node (same name as the
// Node). The controller owns status; the node's agent owns spec.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=ipamnode;ipamnodes,categories=mooring
// +kubebuilder:printcolumn:name="Mode",type=string,JSONPath=`.status.mode`
// +kubebuilder:printcolumn:name="Blocks",type=string,JSONPath=`.status.blocks[*].cidr`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodIPAMNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodIPAMNodeSpec   `json:"spec,omitempty"`
	Status PodIPAMNodeStatus `json:"status,omitempty"`
}

// PodIPAMNodeList is a list of PodIPAMNode.
//
// +kubebuilder:object:root=true
type PodIPAMNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodIPAMNode `json:"items"`
}
