package bgpagent

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgp"
)

// TestPeerMaxReceived: maxReceivedPrefixes reaches the core as set (nil:
// the default, 0: no limit); a value admission would refuse reaches it as
// one the core refuses, naming the field, never as a wrapped-around limit.
func TestPeerMaxReceived(t *testing.T) {
	i64 := func(v int64) *int64 { return &v }
	for _, tc := range []struct {
		in      *int64
		want    uint32 // the session's limit
		refused bool
	}{
		{nil, bgp.DefaultMaxReceived, false},
		{i64(0), 0, false},
		{i64(500), 500, false},
		{i64(bgp.MaxMaxReceived), bgp.MaxMaxReceived, false},
		{i64(-1), 0, true},
		{i64(1 << 33), 0, true},
	} {
		p := &mooringv1.BGPPeer{ObjectMeta: metav1.ObjectMeta{Name: "tor"}, Spec: mooringv1.BGPPeerSpec{
			MyASN: 64512, PeerAddress: "192.0.2.1", MaxReceivedPrefixes: tc.in,
		}}
		r := bgp.Decide(bgp.Input{Nodes: []bgp.Node{{Name: "n1"}}, Peers: []bgp.Peer{Peer(p)}})
		n, _ := r.Node("n1")
		switch {
		case tc.refused:
			if len(n.Sessions) != 0 || len(r.Problems) != 1 || r.Problems[0].Field != "spec.maxReceivedPrefixes" {
				t.Errorf("%d: want refused on spec.maxReceivedPrefixes, got %+v %+v", *tc.in, n.Sessions, r.Problems)
			}
		case len(n.Sessions) != 1 || n.Sessions[0].MaxReceived != tc.want:
			t.Errorf("%v: want a session limited to %d, got %+v %+v", tc.in, tc.want, n.Sessions, r.Problems)
		}
	}
}
