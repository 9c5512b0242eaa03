package status

import (
	"bytes"
	"context"
	"encoding/json"
	"net/netip"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/bgpagent"
)

// bgpFixture: "routed" is advertised by node-1 and node-2 to the router
// (node-2's session down), "down" only over node-3's session, which is
// Active; no L2 policy covers either, and no agent announces over L2.
func bgpRun(t *testing.T, output string) string {
	t.Helper()
	routed := lb("demo", "routed", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.1"}, {IP: "2001:db8::1"}}
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue, Reason: "Assigned"}}
	})
	down := lb("demo", "down", func(s *corev1.Service) {
		s.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: "198.51.100.2"}}
		s.Status.Conditions = []metav1.Condition{{Type: mooringv1.ConditionAddressAssigned, Status: metav1.ConditionTrue, Reason: "Assigned"}}
	})
	up := bgpagent.Carrier{Node: "node-1", Peer: "tor", Established: true, State: mooringv1.BGPStateEstablished}
	n2 := bgpagent.Carrier{Node: "node-2", Peer: "tor", State: mooringv1.BGPStateActive, Reason: mooringv1.BGPReasonConnectRefused}
	n3 := bgpagent.Carrier{Node: "node-3", Peer: "tor", State: mooringv1.BGPStateActive, Reason: mooringv1.BGPReasonAuthFailure}
	adv := bgpagent.Advertised{Known: true, Routes: map[netip.Addr][]bgpagent.Carrier{
		netip.MustParseAddr("198.51.100.1"): {up, n2}, netip.MustParseAddr("2001:db8::1"): {up, n2},
		netip.MustParseAddr("198.51.100.2"): {n3}},
		Speakers: []mooringv1.BGPSpeaker{{ObjectMeta: metav1.ObjectMeta{Name: "node-3"}, Status: mooringv1.BGPSpeakerStatus{Peers: []mooringv1.BGPPeerSession{
			{Name: "tor", PeerAddress: "192.0.2.254", State: mooringv1.BGPStateActive, Reason: mooringv1.BGPReasonAuthFailure,
				Message: "the router refused the password", LastTransitionTime: metav1.NewTime(now.Add(-90e9))}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}, Status: mooringv1.BGPSpeakerStatus{Peers: []mooringv1.BGPPeerSession{
				{Name: "tor", PeerAddress: "192.0.2.254", State: mooringv1.BGPStateEstablished, BFDState: mooringv1.BFDStateUp,
					PrefixesSent: 3, LastTransitionTime: metav1.NewTime(now.Add(-3600e9))}}}}}}
	var out, errw bytes.Buffer
	o := Options{Output: output, Since: DefaultSince, Now: now,
		Announced: func(context.Context) (Announced, error) {
			return Announced{Known: true, Announcers: []mooringv1.L2Announcer{{ObjectMeta: metav1.ObjectMeta{Name: "node-1"}}}}, nil
		},
		BGP: func(context.Context) (bgpagent.Advertised, error) { return adv, nil }}
	if err := Run(context.Background(), fake.NewClientset(routed, down), o, &out, &errw); err != nil || errw.Len() > 0 {
		t.Fatalf("%v %s", err, errw.String())
	}
	return out.String()
}

func TestBGPInTheTable(t *testing.T) {
	out := bgpRun(t, OutputTable)
	rows := lines(out)
	for name, want := range map[string][]string{
		"NAME":   {"ANNOUNCED BY", "ADVERTISED BY", "PROBLEMS"},
		"routed": {"198.51.100.1,2001:db8::1", "node-1  ", "-  "},
		"down":   {"NotAdvertised (now)", "198.51.100.2: BGP advertises it from node-3 to tor"},
	} {
		for _, w := range want {
			if !strings.Contains(rows[name], w) {
				t.Errorf("row %s lacks %q:\n%s", name, w, out)
			}
		}
	}
	// Advertised over BGP and covered by no L2 policy: as configured.
	if strings.Contains(out, ReasonNotAnnounced) {
		t.Errorf("a BGP-advertised address shown as NotAnnounced over L2:\n%s", out)
	}
	for _, w := range []string{"\nBGP SESSIONS\n", "NODE    PEER  ADDRESS      STATE        SINCE  BFD  SENT  RECEIVED  REASON",
		"node-1  tor   192.0.2.254  Established  60m    Up   3     0         -",
		"node-3  tor   192.0.2.254  Active       90s    -    0     0         AuthFailure"} {
		if !strings.Contains(out, w) {
			t.Errorf("the BGP section lacks %q:\n%s", w, out)
		}
	}
}

func TestBGPInJSONAndWide(t *testing.T) {
	var l List
	if err := json.Unmarshal([]byte(bgpRun(t, OutputJSON)), &l); err != nil {
		t.Fatal(err)
	}
	if l.BGP == nil || len(l.BGP.Sessions) != 2 || l.BGP.Sessions[0].Node != "node-1" || l.BGP.Sessions[1].Reason != mooringv1.BGPReasonAuthFailure {
		t.Fatalf("bgp: %+v", l.BGP)
	}
	for _, r := range l.Services {
		if r.Name == "routed" && (len(r.AdvertisedBy) != 2 || r.AdvertisedBy[1].Address != "2001:db8::1" ||
			strings.Join(r.AdvertisedBy[1].Nodes, ",") != "node-1" || strings.Join(r.AdvertisedBy[1].Peers, ",") != "tor") {
			t.Errorf("routed: %+v", r.AdvertisedBy)
		}
	}
	wide := bgpRun(t, OutputWide)
	for _, w := range []string{"198.51.100.1=node-1>tor,2001:db8::1=node-1>tor", "the router refused the password",
		"node-3 to tor: Active, AuthFailure"} {
		if !strings.Contains(wide, w) {
			t.Errorf("-o wide lacks %q:\n%s", w, wide)
		}
	}
}

// Without BGP objects the table is what it was: no ADVERTISED BY, no
// BGP section.
func TestNoBGPNoColumn(t *testing.T) {
	out := run(t, OutputTable)
	if strings.Contains(out, "ADVERTISED BY") || strings.Contains(out, "BGP SESSIONS") {
		t.Fatalf("an L2-only cluster shows BGP:\n%s", out)
	}
}
