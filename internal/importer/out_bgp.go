package importer

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The Mooring BGP objects the importer writes, mirroring api/v1alpha1's
// JSON (bgppeer_types.go, bgpadvertisement_types.go); the BGP round-trip
// test decodes them into the API types, unknown fields refused.

// SecretRef is SecretName.
type SecretRef struct {
	Name string `json:"name"`
}

// GracefulRestart is BGPGracefulRestart.
type GracefulRestart struct {
	Enabled     *bool  `json:"enabled,omitempty"`
	RestartTime string `json:"restartTime,omitempty"`
}

// BGPPeerSpec is api/v1alpha1 BGPPeerSpec.
type BGPPeerSpec struct {
	MyASN           int64                  `json:"myASN"`
	PeerASN         *int64                 `json:"peerASN,omitempty"`
	DynamicASN      string                 `json:"dynamicASN,omitempty"`
	PeerAddress     string                 `json:"peerAddress"`
	PeerPort        int32                  `json:"peerPort,omitempty"`
	SourceAddress   string                 `json:"sourceAddress,omitempty"`
	RouterID        string                 `json:"routerID,omitempty"`
	HoldTime        string                 `json:"holdTime,omitempty"`
	KeepaliveTime   string                 `json:"keepaliveTime,omitempty"`
	ConnectTime     string                 `json:"connectTime,omitempty"`
	NodeSelectors   []metav1.LabelSelector `json:"nodeSelectors,omitempty"`
	PasswordSecret  *SecretRef             `json:"passwordSecret,omitempty"`
	BFDProfile      string                 `json:"bfdProfile,omitempty"`
	GracefulRestart *GracefulRestart       `json:"gracefulRestart,omitempty"`
	EBGPMultihop    *int32                 `json:"ebgpMultihop,omitempty"`
	AddressFamilies []string               `json:"addressFamilies,omitempty"`
}

// BGPPeer is a Mooring BGPPeer.
type BGPPeer struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Metadata   Meta        `json:"metadata"`
	Spec       BGPPeerSpec `json:"spec"`
}

// BGPAdvertisementSpec is api/v1alpha1 BGPAdvertisementSpec.
type BGPAdvertisementSpec struct {
	Pools               []string               `json:"pools,omitempty"`
	PoolSelectors       []metav1.LabelSelector `json:"poolSelectors,omitempty"`
	ServiceSelectors    []metav1.LabelSelector `json:"serviceSelectors,omitempty"`
	NodeSelectors       []metav1.LabelSelector `json:"nodeSelectors,omitempty"`
	Peers               []string               `json:"peers,omitempty"`
	AggregationLength   *int32                 `json:"aggregationLength,omitempty"`
	AggregationLengthV6 *int32                 `json:"aggregationLengthV6,omitempty"`
	LocalPref           *int64                 `json:"localPref,omitempty"`
	Communities         []string               `json:"communities,omitempty"`
	LoadBalancerIPs     *bool                  `json:"loadBalancerIPs,omitempty"`
}

// BGPAdvertisement is a Mooring BGPAdvertisement.
type BGPAdvertisement struct {
	APIVersion string               `json:"apiVersion"`
	Kind       string               `json:"kind"`
	Metadata   Meta                 `json:"metadata"`
	Spec       BGPAdvertisementSpec `json:"spec"`
}

// CommunityAlias is BGPCommunityAlias.
type CommunityAlias struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// BGPCommunity is a Mooring BGPCommunity.
type BGPCommunity struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   Meta   `json:"metadata"`
	Spec       struct {
		Communities []CommunityAlias `json:"communities"`
	} `json:"spec"`
}

// BFDProfileSpec is api/v1alpha1 BFDProfileSpec.
type BFDProfileSpec struct {
	ReceiveInterval  *int32 `json:"receiveInterval,omitempty"`
	TransmitInterval *int32 `json:"transmitInterval,omitempty"`
	DetectMultiplier *int32 `json:"detectMultiplier,omitempty"`
}

// BFDProfile is a Mooring BFDProfile.
type BFDProfile struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   Meta           `json:"metadata"`
	Spec       BFDProfileSpec `json:"spec"`
}

// BGPObjects are the BGP objects of an import.
type BGPObjects struct {
	Peers          []BGPPeer
	Advertisements []BGPAdvertisement
	Communities    []BGPCommunity
	BFDProfiles    []BFDProfile
}

// objects returns them for printing: profiles and communities first (the
// peers and advertisements refer to them), then peers, advertisements.
func (b *BGPObjects) objects() []any {
	var out []any
	for i := range b.BFDProfiles {
		out = append(out, &b.BFDProfiles[i])
	}
	for i := range b.Communities {
		out = append(out, &b.Communities[i])
	}
	for i := range b.Peers {
		out = append(out, &b.Peers[i])
	}
	for i := range b.Advertisements {
		out = append(out, &b.Advertisements[i])
	}
	return out
}

func newMeta(name, from string) Meta {
	return Meta{Name: name, Annotations: map[string]string{AnnotationImportedFrom: from}}
}
