package gather

import (
	"net/netip"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgpagent"
	"github.com/mooringlb/mooring/internal/doctor"
)

func TestBGPFacts(t *testing.T) {
	a, b := netip.MustParseAddr("192.0.2.200"), netip.MustParseAddr("192.0.2.201")
	in := doctor.Inputs{
		Pools:    []doctor.Pool{{Name: "routed"}, {Name: "l2"}},
		Services: []doctor.Service{{Namespace: "d", Name: "web", Addrs: []netip.Addr{a, b}}},
	}
	adv := bgpagent.Advertised{Known: true, Pools: []string{"routed"},
		Peers: []mooringv1.BGPPeer{{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: mooringv1.BGPPeerSpec{PeerAddress: "192.0.2.1"}},
			{ObjectMeta: metav1.ObjectMeta{Name: "bad"}, Spec: mooringv1.BGPPeerSpec{PeerAddress: "not an address"}}},
		Routes: map[netip.Addr][]bgpagent.Carrier{a: {{Node: "n1", Peer: "tor"}, {Node: "n1", Peer: "spine"}, {Node: "n2", Peer: "tor"}}},
		Speakers: []mooringv1.BGPSpeaker{{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Status: mooringv1.BGPSpeakerStatus{Peers: []mooringv1.BGPPeerSession{
			{Name: "tor", PeerAddress: "192.0.2.1", State: mooringv1.BGPStateEstablished, PrefixesReceived: 7},
			{Name: "spine", PeerAddress: "192.0.2.9", State: mooringv1.BGPStateActive, Reason: mooringv1.BGPReasonConnectRefused, Message: "m"}}}}}}
	bgpFacts(&in, adv)
	if !reflect.DeepEqual(in.BGPPeers, []doctor.BGPPeer{{Name: "tor", Address: netip.MustParseAddr("192.0.2.1")}}) {
		t.Errorf("peers: %+v", in.BGPPeers)
	}
	if !in.Pools[0].BGP || in.Pools[1].BGP {
		t.Errorf("pools: %+v", in.Pools)
	}
	if want := []doctor.BGPSession{{Node: "n1", Peer: "tor", Address: "192.0.2.1", Established: true, State: "Established", Received: 7},
		{Node: "n1", Peer: "spine", Address: "192.0.2.9", State: "Active", Reason: mooringv1.BGPReasonConnectRefused, Message: "m"}}; !reflect.DeepEqual(in.BGPSessions, want) {
		t.Errorf("sessions: %+v", in.BGPSessions)
	}
	s := in.Services[0]
	if !s.Ours || !reflect.DeepEqual(s.AdvertisedBy, map[netip.Addr][]string{a: {"n1", "n2"}}) {
		t.Errorf("service: %+v", s)
	}
}
