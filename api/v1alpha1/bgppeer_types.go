package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func init() { SchemeBuilder.Register(addBGPTypes) }

func addBGPTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion,
		&BGPPeer{}, &BGPPeerList{},
		&BGPAdvertisement{}, &BGPAdvertisementList{},
		&BFDProfile{}, &BFDProfileList{},
		&BGPCommunity{}, &BGPCommunityList{},
		&BGPSpeaker{}, &BGPSpeakerList{},
	)
	return nil
}

// BGP defaults, chosen for a data-centre fabric (docs/bgp.md says why).
const (
	// DefaultBGPHoldTime: a dead peer without BFD is noticed within 9 s
	// (RFC 4271 suggests 90 s, far too long for a load balancer; 3 s is
	// the protocol's floor and flaps on a loaded node). 9/3 s is the
	// common fabric setting (Cumulus, SONiC).
	DefaultBGPHoldTime = "9s"
	// DefaultBGPKeepaliveTime is a third of the hold time (RFC 4271).
	DefaultBGPKeepaliveTime = "3s"
	// DefaultBGPConnectTime: a peer that comes back is found within 5 s
	// (FRR and Cilium wait 120 s between attempts), at the cost of one SYN
	// per 5 s while it is away.
	DefaultBGPConnectTime = "5s"
	// DefaultBGPGracefulRestartTime is how long the router keeps a
	// restarting node's routes (RFC 4724 restart time): an agent restart
	// takes seconds, a node reboot does not need stale routes for longer.
	DefaultBGPGracefulRestartTime = "120s"
	// DefaultBGPMaxReceivedPrefixes is how many prefixes of one address
	// family a node keeps from a router before it closes the session
	// (maxReceivedPrefixes). The agent uses no route a router sends, but
	// GoBGP keeps each in the session's Adj-RIB-In, ~0.65 KiB apiece: a
	// full Internet table (~1M IPv4 routes) would put the agent far past
	// its 256 MiB memory limit into a crash loop that takes L2 and every
	// other session with it. 100,000 (~65 MiB) is refused long before
	// that and is five times what a router reflecting the other nodes'
	// Service routes sent each node at 10,000 Services.
	DefaultBGPMaxReceivedPrefixes = 100000
	// BGPPasswordSecretKey is the Secret key holding a peer's TCP-MD5
	// password (MetalLB's basic-auth Secret and Cilium's authSecretRef use
	// the same key).
	BGPPasswordSecretKey = "password"
)

// DynamicASNMode restricts a learned peer ASN.
//
// +kubebuilder:validation:Enum=internal;external
type DynamicASNMode string

const (
	// DynamicASNInternal accepts only a peer in myASN (iBGP).
	DynamicASNInternal DynamicASNMode = "internal"
	// DynamicASNExternal accepts only a peer in another AS (eBGP).
	DynamicASNExternal DynamicASNMode = "external"
)

// BGPAddressFamily is an address family a session carries.
//
// +kubebuilder:validation:Enum=IPv4;IPv6
type BGPAddressFamily string

const (
	BGPFamilyIPv4 BGPAddressFamily = "IPv4"
	BGPFamilyIPv6 BGPAddressFamily = "IPv6"
)

// SecretName names a Secret in the namespace Mooring runs in.
type SecretName struct {
	// Name of the Secret. The agent reads only Secrets that a BGPPeer
	// names, and only in Mooring's own namespace.
	//
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
}

// BGPGracefulRestart is RFC 4724 graceful restart, both roles: as the
// restarting speaker the agent stops without a Cease on SIGTERM, and the
// router keeps its routes for restartTime; as helper the agent keeps the
// router's routes (it learns none it uses).
type BGPGracefulRestart struct {
	// Enabled advertises the graceful-restart capability. Default true.
	// Changing it resets this peer's session (the capability is in the
	// OPEN message); no other session is touched.
	//
	// +optional
	// +kubebuilder:default=true
	Enabled *bool `json:"enabled,omitempty"`

	// RestartTime is how long the router keeps this node's routes as
	// stale after the session drops without a NOTIFICATION, whole seconds,
	// 1s-4095s. Default 120s.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('4095s')",message="restartTime must be between 1s and 4095s (a 12-bit field of the capability)"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 1000 == 0",message="restartTime must be whole seconds, e.g. 120s"
	RestartTime *metav1.Duration `json:"restartTime,omitempty"`
}

// BGPPeerSpec is one router the agents peer with: which nodes, how, and
// with which timers. Field names follow MetalLB's BGPPeer v1beta2 where
// the meaning is the same (docs/import.md maps every field).
//
// +kubebuilder:validation:XValidation:rule="!(has(self.peerASN) && has(self.dynamicASN))",message="peerASN and dynamicASN are mutually exclusive: set peerASN to the router's AS, or dynamicASN (internal|external) to learn it, or neither to accept any AS"
// +kubebuilder:validation:XValidation:rule="!has(self.holdTime) || !has(self.keepaliveTime) || duration(self.keepaliveTime) < duration(self.holdTime)",message="keepaliveTime must be shorter than holdTime (a third of it is usual, e.g. holdTime 9s, keepaliveTime 3s)"
// +kubebuilder:validation:XValidation:rule="!has(self.sourceAddress) || !isIP(self.sourceAddress) || !isIP(self.peerAddress) || ip(self.sourceAddress).family() == ip(self.peerAddress).family()",message="sourceAddress must be of the same IP family as peerAddress"
// +kubebuilder:validation:XValidation:rule="!has(self.ebgpMultihop) || self.ebgpMultihop == 1 || !has(self.peerASN) || self.peerASN != self.myASN",message="ebgpMultihop applies to eBGP only: this peer's peerASN equals myASN (iBGP sessions may span hops already); remove ebgpMultihop"
type BGPPeerSpec struct {
	// MyASN is the AS number of the nodes' end of the session.
	//
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967294
	MyASN int64 `json:"myASN"`

	// PeerASN is the router's AS number. Absent (or 0) with no dynamicASN:
	// accept whatever AS the router's OPEN names (Cilium's peerASN 0).
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=4294967294
	PeerASN *int64 `json:"peerASN,omitempty"`

	// DynamicASN learns the router's AS from its OPEN and accepts it only
	// if it is myASN (internal) or not (external); a mismatch is reported
	// as PeerASMismatch.
	//
	// +optional
	DynamicASN DynamicASNMode `json:"dynamicASN,omitempty"`

	// PeerAddress is the router's address on the session, IPv4 or IPv6.
	//
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="peerAddress must be one IPv4 or IPv6 address, such as 192.0.2.1 or 2001:db8::1"
	// +kubebuilder:validation:XValidation:rule="!isIP(self) || ip(self).isGlobalUnicast()",message="peerAddress must be a unicast address of the router that is not loopback, link-local or multicast"
	PeerAddress string `json:"peerAddress"`

	// PeerPort is the router's TCP port. Default 179.
	//
	// +optional
	// +kubebuilder:default=179
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	PeerPort int32 `json:"peerPort,omitempty"`

	// SourceAddress is the node's address the session is opened from.
	// A node that does not hold it reports NoRoute for this peer.
	// Absent: the kernel's choice for peerAddress.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=45
	// +kubebuilder:validation:XValidation:rule="isIP(self)",message="sourceAddress must be one IPv4 or IPv6 address of the node"
	SourceAddress string `json:"sourceAddress,omitempty"`

	// RouterID is the node's BGP identifier (an IPv4 address). Absent: the
	// node's first IPv4 InternalIP, or a hash of the node name on an
	// IPv6-only node. Every BGPPeer selecting a node must name the same
	// routerID or none (one BGP instance per node).
	//
	// +optional
	// +kubebuilder:validation:MaxLength=15
	// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 4",message="routerID must be an IPv4 address, such as 10.0.0.1"
	RouterID string `json:"routerID,omitempty"`

	// HoldTime is the hold time offered in OPEN, whole seconds, 3s-65535s.
	// Default 9s. Without BFD a dead router is detected after the
	// negotiated (smaller) hold time. RFC 4271's 0 (no keepalives at all)
	// is not offered: a session that never checks its peer is what BFD
	// and hold timers exist to prevent.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('3s') && duration(self) <= duration('65535s')",message="holdTime must be between 3s and 65535s (9s is the default)"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 1000 == 0",message="holdTime must be whole seconds, e.g. 9s"
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`

	// KeepaliveTime is the interval between KEEPALIVEs, whole seconds.
	// Default: a third of the hold time.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('21845s')",message="keepaliveTime must be between 1s and 21845s"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 1000 == 0",message="keepaliveTime must be whole seconds, e.g. 3s"
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`

	// ConnectTime is the wait between connection attempts, whole seconds,
	// 1s-65535s. Default 5s.
	//
	// +optional
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('65535s')",message="connectTime must be between 1s and 65535s"
	// +kubebuilder:validation:XValidation:rule="duration(self).getMilliseconds() % 1000 == 0",message="connectTime must be whole seconds, e.g. 5s"
	ConnectTime *metav1.Duration `json:"connectTime,omitempty"`

	// NodeSelectors pick the nodes that peer with this router: a node
	// matching any of them. Empty: every node.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	NodeSelectors []metav1.LabelSelector `json:"nodeSelectors,omitempty"`

	// PasswordSecret names a Secret in Mooring's namespace whose key
	// "password" is the TCP-MD5 (RFC 2385) password. While the Secret or
	// its key is missing, or the kernel refuses TCP-MD5, the session is not
	// opened (never unauthenticated) and the status says why.
	//
	// +optional
	PasswordSecret *SecretName `json:"passwordSecret,omitempty"`

	// BFDProfile names the BFDProfile of this peer's BFD session
	// (single-hop, asynchronous). Absent: no BFD; failure detection is the
	// hold time.
	//
	// +optional
	// +kubebuilder:validation:MaxLength=253
	BFDProfile string `json:"bfdProfile,omitempty"`

	// GracefulRestart: default enabled with a 120s restart time.
	//
	// +optional
	GracefulRestart *BGPGracefulRestart `json:"gracefulRestart,omitempty"`

	// EBGPMultihop is the TTL of an eBGP session's packets: 1 (default) for
	// a directly connected router, up to 255 for one several hops away.
	// MetalLB's ebgpMultiHop: true is 255 here.
	//
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=255
	EBGPMultihop *int32 `json:"ebgpMultihop,omitempty"`

	// AddressFamilies the session carries. Default: the family of
	// peerAddress. Both (MetalLB's dualStackAddressFamily) advertise IPv6
	// prefixes over an IPv4 session (or the reverse) with the node's own
	// global address of that family as next hop, never a v4-mapped one: a
	// node without one advertises nothing of that family and says so.
	//
	// +optional
	// +kubebuilder:validation:MaxItems=2
	// +listType=set
	AddressFamilies []BGPAddressFamily `json:"addressFamilies,omitempty"`

	// MaxReceivedPrefixes is the most prefixes of one address family the
	// node keeps from this router. The agent uses none of them (it sends
	// its own routes only) but holds each in memory (~0.65 KiB): past it
	// the node closes the session (a Cease, Administrative Shutdown, whose
	// shutdown communication names the limit; the count is checked once a
	// second), the node's BGPSpeaker says MaxPrefixesExceeded, and the
	// session is opened again after 30s, doubling up to 10m while the
	// router keeps sending too many (at once when this field changes).
	// Default 100000; 0: no limit (the agent's memory limit is then the
	// only one). Configure the router to send the nodes nothing instead
	// of raising this (docs/bgp.md, Configuring the router).
	//
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100000000
	MaxReceivedPrefixes *int64 `json:"maxReceivedPrefixes,omitempty"`
}

// BGPPeerStatus is written by the agents' status writer (one agent) when
// the spec changes; per-node session state is in each node's BGPSpeaker.
type BGPPeerStatus struct {
	// Conditions: Ready (the spec is usable), InvalidSpec (what admission
	// could not check: a missing BFDProfile, a conflicting routerID, a bad
	// selector).
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

// BGPPeer is a router the agents open BGP sessions to.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bgppeer,categories=mooring
// +kubebuilder:printcolumn:name="Address",type=string,JSONPath=`.spec.peerAddress`
// +kubebuilder:printcolumn:name="My ASN",type=integer,JSONPath=`.spec.myASN`
// +kubebuilder:printcolumn:name="Peer ASN",type=integer,JSONPath=`.spec.peerASN`
// +kubebuilder:printcolumn:name="BFD",type=string,JSONPath=`.spec.bfdProfile`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPPeer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   BGPPeerSpec   `json:"spec"`
	Status BGPPeerStatus `json:"status,omitempty"`
}

// BGPPeerList is a list of BGPPeer.
//
// +kubebuilder:object:root=true
type BGPPeerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPPeer `json:"items"`
}
