package bgpagent

import (
	"net/netip"
	"reflect"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
)

func TestCarriers(t *testing.T) {
	a1, a2, a3 := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.100.2"), netip.MustParseAddr("203.0.113.9")
	route := func(p string) bgp.Route { return bgp.Route{Prefix: netip.MustParsePrefix(p)} }
	res := bgp.Result{Nodes: []bgp.NodeResult{
		{Node: "node-2", Sessions: []bgp.Session{{Peer: "tor", Routes: []bgp.Route{route("198.51.100.1/32")}}}},
		{Node: "node-1", Sessions: []bgp.Session{
			{Peer: "tor", Routes: []bgp.Route{route("198.51.100.1/32"), route("198.51.100.0/24")}}, // and an aggregate
			{Peer: "spine", Blocked: "no password", Routes: []bgp.Route{route("203.0.113.9/32")}},
		}},
	}}
	svcs := []*announce.Service{{IngressIPs: []netip.Addr{a1, a2}}, {IngressIPs: []netip.Addr{a3}}}
	speakers := []mooringv1.BGPSpeaker{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: mooringv1.BGPSpeakerStatus{Peers: []mooringv1.BGPPeerSession{
		{Name: "tor", State: mooringv1.BGPStateEstablished}}}}}
	got := carriers(res, svcs, speakers)
	up := Carrier{Node: "node-1", Peer: "tor", Established: true, State: mooringv1.BGPStateEstablished}
	want := map[netip.Addr][]Carrier{
		a1: {up, {Node: "node-2", Peer: "tor"}}, // sorted by node; node-2 wrote no status
		a2: {up},                                // through the aggregate only
	} // a3: only on a session that is not opened
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("carriers:\n got %+v\nwant %+v", got, want)
	}
}
