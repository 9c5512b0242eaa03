package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BGPSessionState is a BGP session's finite-state-machine state (RFC 4271).
//
// +kubebuilder:validation:Enum=Idle;Connect;Active;OpenSent;OpenConfirm;Established
type BGPSessionState string

const (
	BGPStateIdle        BGPSessionState = "Idle"
	BGPStateConnect     BGPSessionState = "Connect"
	BGPStateActive      BGPSessionState = "Active"
	BGPStateOpenSent    BGPSessionState = "OpenSent"
	BGPStateOpenConfirm BGPSessionState = "OpenConfirm"
	BGPStateEstablished BGPSessionState = "Established"
)

// BFDSessionState is a BFD session's state (RFC 5880), or Off without a
// profile.
//
// +kubebuilder:validation:Enum=Off;AdminDown;Down;Init;Up
type BFDSessionState string

const (
	BFDStateOff       BFDSessionState = "Off"
	BFDStateAdminDown BFDSessionState = "AdminDown"
	BFDStateDown      BFDSessionState = "Down"
	BFDStateInit      BFDSessionState = "Init"
	BFDStateUp        BFDSessionState = "Up"
)

// Reasons a BGP session is not Established (BGPPeerSession.Reason). They
// are machine-readable; Message says what happened and what to do.
const (
	// BGPReasonAuthFailure: the TCP-MD5 signatures did not match (the
	// kernel dropped the peer's segments, or no answer came to signed
	// SYNs while the router answers unsigned ones).
	BGPReasonAuthFailure = "AuthFailure"
	// BGPReasonPeerASMismatch: the router's OPEN named another AS than
	// peerASN (or one dynamicASN does not allow), or the router refused
	// ours (NOTIFICATION OPEN Message Error / Bad Peer AS).
	BGPReasonPeerASMismatch = "PeerASMismatch"
	// BGPReasonHoldTimerExpired: no KEEPALIVE or UPDATE within the hold
	// time.
	BGPReasonHoldTimerExpired = "HoldTimerExpired"
	// BGPReasonBFDDown: BFD declared the path down and the session was
	// reset.
	BGPReasonBFDDown = "BFDDown"
	// BGPReasonConnectRefused: the router answered the SYN with a RST
	// (nothing listens on peerPort, or the router does not accept this
	// node's address).
	BGPReasonConnectRefused = "ConnectRefused"
	// BGPReasonNoRoute: the node has no route to peerAddress, or does not
	// hold sourceAddress.
	BGPReasonNoRoute = "NoRoute"
	// BGPReasonOpenMessageError: an OPEN was refused for another reason
	// than the AS (router ID, hold time, capabilities).
	BGPReasonOpenMessageError = "OpenMessageError"
	// BGPReasonConnectTimeout: the router never answered the SYN.
	BGPReasonConnectTimeout = "ConnectTimeout"
	// BGPReasonNotificationReceived: the router closed the session with
	// another NOTIFICATION (its code and subcode are in Message).
	BGPReasonNotificationReceived = "NotificationReceived"
	// BGPReasonInvalidMessage: the router sent a malformed message; the
	// session was closed with a NOTIFICATION.
	BGPReasonInvalidMessage = "InvalidMessage"
	// BGPReasonConnectionClosed: the TCP connection closed without a
	// NOTIFICATION.
	BGPReasonConnectionClosed = "ConnectionClosed"
	// BGPReasonPasswordUnavailable: passwordSecret names a Secret (or key)
	// the agent cannot read: the session is not opened, never
	// unauthenticated.
	BGPReasonPasswordUnavailable = "PasswordUnavailable"
	// BGPReasonMD5Unsupported: the kernel refused TCP-MD5 for this
	// session: it is not opened, never unauthenticated.
	BGPReasonMD5Unsupported = "MD5Unsupported"
	// BGPReasonInvalidConfig: the peer's configuration cannot be used on
	// this node (Message names the field and the fix).
	BGPReasonInvalidConfig = "InvalidConfig"
	// BGPReasonMaxPrefixesExceeded: the router sent more prefixes of one
	// family than the BGPPeer's maxReceivedPrefixes; the node closed the
	// session (Cease, Administrative Shutdown, saying why) and opens it
	// again later (Message says when).
	BGPReasonMaxPrefixesExceeded = "MaxPrefixesExceeded"
	// BGPReasonConnecting: the first attempt is under way.
	BGPReasonConnecting = "Connecting"
)

// BGPPeerSession is one BGP session of a node.
type BGPPeerSession struct {
	// Name is the BGPPeer's name.
	Name string `json:"name"`
	// PeerAddress is the router's address.
	PeerAddress string `json:"peerAddress"`
	// LocalASN is this node's AS on the session.
	//
	// +optional
	LocalASN int64 `json:"localASN,omitempty"`
	// PeerASN is the router's AS: configured, or learned from its OPEN.
	//
	// +optional
	PeerASN int64 `json:"peerASN,omitempty"`

	// State is the session's state.
	State BGPSessionState `json:"state"`
	// Reason is set when State is not Established: why (one of the
	// BGPReason constants).
	//
	// +optional
	Reason string `json:"reason,omitempty"`
	// Message says what happened and how to fix it; it may also be set on
	// an Established session (e.g. a BFD profile that does not exist).
	//
	// +optional
	Message string `json:"message,omitempty"`
	// LastTransitionTime is when State last changed.
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
	// EstablishedTime is when the session was last established (uptime is
	// now minus this); absent when it is not.
	//
	// +optional
	EstablishedTime *metav1.Time `json:"establishedTime,omitempty"`

	// BFDState is the BFD session's state, Off without a profile.
	//
	// +optional
	BFDState BFDSessionState `json:"bfdState,omitempty"`
	// HoldTime and KeepaliveTime are the negotiated timers of the
	// established session.
	//
	// +optional
	HoldTime *metav1.Duration `json:"holdTime,omitempty"`
	// +optional
	KeepaliveTime *metav1.Duration `json:"keepaliveTime,omitempty"`
	// Families are the address families both ends negotiated.
	//
	// +optional
	// +listType=atomic
	Families []BGPAddressFamily `json:"families,omitempty"`
	// GracefulRestart is true when both ends negotiated it.
	//
	// +optional
	GracefulRestart bool `json:"gracefulRestart,omitempty"`
	// PrefixesSent and PrefixesReceived count prefixes on the session.
	// They are refreshed with every state change and otherwise at most
	// once a minute, so a Service costs no write.
	//
	// +optional
	PrefixesSent int64 `json:"prefixesSent,omitempty"`
	// +optional
	PrefixesReceived int64 `json:"prefixesReceived,omitempty"`
}

// BGPSpeakerStatus is one node's BGP instance.
type BGPSpeakerStatus struct {
	// RouterID is the node's BGP identifier.
	//
	// +optional
	RouterID string `json:"routerID,omitempty"`
	// Peers are the node's sessions, one per selected BGPPeer, sorted by
	// name.
	//
	// +optional
	// +listType=map
	// +listMapKey=name
	Peers []BGPPeerSession `json:"peers,omitempty"`
	// PeerCount and EstablishedCount count Peers and those Established.
	//
	// +optional
	PeerCount int32 `json:"peerCount,omitempty"`
	// +optional
	EstablishedCount int32 `json:"establishedCount,omitempty"`
	// Applied is the configuration the node's last decision used (the
	// BGPPeers and BGPAdvertisements with their generations, in Policies).
	//
	// +optional
	Applied *AppliedConfig `json:"applied,omitempty"`
}

// BGPSpeaker is one node's BGP speaker, named after its Node. Only that
// node's agent may write it (a ValidatingAdmissionPolicy in config/agent
// binds writes to the node in the caller's ServiceAccount token). It is
// written when a session changes (at most once a second), never per
// Service.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=bgpspeaker,categories=mooring
// +kubebuilder:printcolumn:name="Router ID",type=string,JSONPath=`.status.routerID`
// +kubebuilder:printcolumn:name="Peers",type=integer,JSONPath=`.status.peerCount`
// +kubebuilder:printcolumn:name="Established",type=integer,JSONPath=`.status.establishedCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type BGPSpeaker struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status BGPSpeakerStatus `json:"status,omitempty"`
}

// BGPSpeakerList is a list of BGPSpeaker.
//
// +kubebuilder:object:root=true
type BGPSpeakerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []BGPSpeaker `json:"items"`
}
