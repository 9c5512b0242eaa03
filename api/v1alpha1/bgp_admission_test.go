package v1alpha1_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/testenv"
)

func dur(s string) *metav1.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return &metav1.Duration{Duration: d}
}

// admitCase is one object and the admission error it must get ("" means
// admitted).
type admitCase struct {
	name    string
	obj     client.Object
	wantErr string
}

func runAdmission(t *testing.T, env *testenv.Env, cases []admitCase) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.obj.SetName(fmt.Sprintf("case-%d", i))
			err := env.Client.Create(ctx, tc.obj)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("valid object rejected: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("invalid object admitted; want an error containing %q", tc.wantErr)
			}
			if !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error %q does not contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestBGPAdmission proves on one real kube-apiserver that the CEL rules
// refuse bad BGP objects with a message naming the field and the fix, and
// fill in the documented defaults.
func TestBGPAdmission(t *testing.T) {
	env := testenv.StartT(t)
	t.Run("BGPPeer", func(t *testing.T) { testBGPPeerAdmission(t, env) })
	t.Run("BGPAdvertisement", func(t *testing.T) { testBGPAdvertisementAdmission(t, env) })
	t.Run("BFDProfile+BGPCommunity", func(t *testing.T) { testBFDProfileAndCommunityAdmission(t, env) })
}

func testBGPPeerAdmission(t *testing.T, env *testenv.Env) {
	peer := func(mut func(*mooringv1.BGPPeerSpec)) client.Object {
		s := mooringv1.BGPPeerSpec{MyASN: 64512, PeerASN: ptr(int64(64500)), PeerAddress: "192.0.2.1"}
		mut(&s)
		return &mooringv1.BGPPeer{Spec: s}
	}
	none := func(*mooringv1.BGPPeerSpec) {}
	runAdmission(t, env, []admitCase{
		{"minimal", peer(none), ""},
		{"v6 peer, learned ASN", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerAddress = "2001:db8::1"; s.PeerASN = nil }), ""},
		{"dynamic internal", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerASN = nil; s.DynamicASN = mooringv1.DynamicASNInternal }), ""},
		{"every field", peer(func(s *mooringv1.BGPPeerSpec) {
			s.PeerPort = 1179
			s.SourceAddress = "192.0.2.10"
			s.RouterID = "10.0.0.1"
			s.HoldTime, s.KeepaliveTime, s.ConnectTime = dur("30s"), dur("10s"), dur("2s")
			s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "a"}}}
			s.PasswordSecret = &mooringv1.SecretName{Name: "tor-a"}
			s.BFDProfile = "fast"
			s.GracefulRestart = &mooringv1.BGPGracefulRestart{Enabled: ptr(true), RestartTime: dur("30s")}
			s.EBGPMultihop = ptr(int32(4))
			s.AddressFamilies = []mooringv1.BGPAddressFamily{mooringv1.BGPFamilyIPv4, mooringv1.BGPFamilyIPv6}
			s.MaxReceivedPrefixes = ptr(int64(500))
		}), ""},
		{"no received limit", peer(func(s *mooringv1.BGPPeerSpec) { s.MaxReceivedPrefixes = ptr(int64(0)) }), ""},
		{"negative received limit", peer(func(s *mooringv1.BGPPeerSpec) { s.MaxReceivedPrefixes = ptr(int64(-1)) }), "spec.maxReceivedPrefixes"},
		{"received limit too large", peer(func(s *mooringv1.BGPPeerSpec) { s.MaxReceivedPrefixes = ptr(int64(100000001)) }), "spec.maxReceivedPrefixes"},
		{"hold 0", peer(func(s *mooringv1.BGPPeerSpec) { s.HoldTime = dur("0s") }), "holdTime must be between 3s and 65535s"},
		{"asn 0", peer(func(s *mooringv1.BGPPeerSpec) { s.MyASN = 0 }), "spec.myASN"},
		{"peerASN and dynamicASN", peer(func(s *mooringv1.BGPPeerSpec) { s.DynamicASN = mooringv1.DynamicASNExternal }), "peerASN and dynamicASN are mutually exclusive"},
		{"bad dynamicASN", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerASN = nil; s.DynamicASN = "both" }), "spec.dynamicASN"},
		{"peer address text", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerAddress = "router-1" }), "peerAddress must be one IPv4 or IPv6 address"},
		{"peer address loopback", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerAddress = "127.0.0.1" }), "not loopback, link-local or multicast"},
		{"peer address link-local", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerAddress = "fe80::1" }), "not loopback, link-local or multicast"},
		{"port 0", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerPort = -1 }), "spec.peerPort"},
		{"source family", peer(func(s *mooringv1.BGPPeerSpec) { s.SourceAddress = "2001:db8::10" }), "sourceAddress must be of the same IP family as peerAddress"},
		{"router id v6", peer(func(s *mooringv1.BGPPeerSpec) { s.RouterID = "2001:db8::1" }), "routerID must be an IPv4 address"},
		{"hold 2s", peer(func(s *mooringv1.BGPPeerSpec) { s.HoldTime = dur("2s") }), "holdTime must be between 3s and 65535s"},
		{"hold fraction", peer(func(s *mooringv1.BGPPeerSpec) { s.HoldTime = dur("9500ms") }), "holdTime must be whole seconds"},
		{"keepalive not below hold", peer(func(s *mooringv1.BGPPeerSpec) { s.HoldTime, s.KeepaliveTime = dur("9s"), dur("9s") }), "keepaliveTime must be shorter than holdTime"},
		{"connect 0", peer(func(s *mooringv1.BGPPeerSpec) { s.ConnectTime = dur("0s") }), "connectTime must be between 1s and 65535s"},
		{"restart too long", peer(func(s *mooringv1.BGPPeerSpec) {
			s.GracefulRestart = &mooringv1.BGPGracefulRestart{RestartTime: dur("5000s")}
		}), "restartTime must be between 1s and 4095s"},
		{"multihop 0", peer(func(s *mooringv1.BGPPeerSpec) { s.EBGPMultihop = ptr(int32(0)) }), "spec.ebgpMultihop"},
		{"multihop on iBGP", peer(func(s *mooringv1.BGPPeerSpec) { s.PeerASN = ptr(int64(64512)); s.EBGPMultihop = ptr(int32(3)) }), "ebgpMultihop applies to eBGP only"},
		{"bad family", peer(func(s *mooringv1.BGPPeerSpec) { s.AddressFamilies = []mooringv1.BGPAddressFamily{"IPX"} }), "spec.addressFamilies"},
		{"secret name", peer(func(s *mooringv1.BGPPeerSpec) { s.PasswordSecret = &mooringv1.SecretName{Name: "Tor_A"} }), "spec.passwordSecret.name"},
	})

	// Defaults: port 179, graceful restart on.
	ctx := context.Background()
	var got mooringv1.BGPPeer
	if err := env.Client.Get(ctx, client.ObjectKey{Name: "case-0"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.PeerPort != 179 {
		t.Fatalf("peerPort default %d, want 179", got.Spec.PeerPort)
	}
}

// Communities, aggregation lengths and localPref are checked at admission.
func testBGPAdvertisementAdmission(t *testing.T, env *testenv.Env) {
	adv := func(mut func(*mooringv1.BGPAdvertisementSpec)) client.Object {
		var s mooringv1.BGPAdvertisementSpec
		mut(&s)
		return &mooringv1.BGPAdvertisement{Spec: s}
	}
	runAdmission(t, env, []admitCase{
		{"empty", adv(func(*mooringv1.BGPAdvertisementSpec) {}), ""},
		{"every field", adv(func(s *mooringv1.BGPAdvertisementSpec) {
			s.Pools = []string{"default"}
			s.PoolSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"bgp": "yes"}}}
			s.ServiceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"app": "web"}}}
			s.NamespaceSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"team": "a"}}}
			s.NodeSelectors = []metav1.LabelSelector{{MatchLabels: map[string]string{"rack": "a"}}}
			s.Peers = []string{"tor-a"}
			s.AggregationLength, s.AggregationLengthV6 = ptr(int32(24)), ptr(int32(64))
			s.LocalPref = ptr(int64(4294967295))
			s.Communities = []string{"65535:65281", "large:4294967295:0:1", "no-export-upstream"}
			s.ExternalIPs = true
		}), ""},
		{"community over 16 bits", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.Communities = []string{"65536:1"} }), "a standard community is two numbers 0-65535"},
		{"large community over 32 bits", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.Communities = []string{"large:1:2:4294967296"} }), "a large community is large:A:B:C"},
		{"large community short", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.Communities = []string{"large:1:2"} }), "a large community is large:A:B:C"},
		{"community text", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.Communities = []string{"No Export"} }), "the name of a BGPCommunity alias"},
		{"aggregation v4 33", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.AggregationLength = ptr(int32(33)) }), "spec.aggregationLength"},
		{"aggregation v6 129", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.AggregationLengthV6 = ptr(int32(129)) }), "spec.aggregationLengthV6"},
		{"localPref negative", adv(func(s *mooringv1.BGPAdvertisementSpec) { s.LocalPref = ptr(int64(-1)) }), "spec.localPref"},
	})
	var got mooringv1.BGPAdvertisement
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "case-0"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.AggregationLength == nil || *got.Spec.AggregationLength != 32 || got.Spec.AggregationLengthV6 == nil ||
		*got.Spec.AggregationLengthV6 != 128 || got.Spec.LoadBalancerIPs == nil || !*got.Spec.LoadBalancerIPs {
		t.Fatalf("defaults: %+v", got.Spec)
	}
}

// BFD timer ranges and community alias values.
func testBFDProfileAndCommunityAdmission(t *testing.T, env *testenv.Env) {
	bfd := func(rx, tx, mult int32) client.Object {
		return &mooringv1.BFDProfile{Spec: mooringv1.BFDProfileSpec{ReceiveInterval: &rx, TransmitInterval: &tx, DetectMultiplier: &mult}}
	}
	alias := func(name, value string) client.Object {
		return &mooringv1.BGPCommunity{Spec: mooringv1.BGPCommunitySpec{Communities: []mooringv1.BGPCommunityAlias{{Name: name, Value: value}}}}
	}
	runAdmission(t, env, []admitCase{
		{"bfd defaults", &mooringv1.BFDProfile{}, ""},
		{"bfd fast", bfd(50, 50, 3), ""},
		{"bfd rx 5ms", bfd(5, 300, 3), "spec.receiveInterval"},
		{"bfd tx 61s", bfd(300, 61000, 3), "spec.transmitInterval"},
		{"bfd multiplier 1", bfd(300, 300, 1), "spec.detectMultiplier"},
		{"alias standard", alias("no-export", "65535:65281"), ""},
		{"alias large", alias("blackhole-large", "large:65000:666:0"), ""},
		{"alias bad value", alias("x", "65000"), "value must be a standard community"},
		{"alias bad name", alias("No_Export", "65535:65281"), "spec.communities[0].name"},
	})
	var got mooringv1.BFDProfile
	if err := env.Client.Get(context.Background(), client.ObjectKey{Name: "case-0"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.ReceiveInterval == nil || *got.Spec.ReceiveInterval != 300 || *got.Spec.TransmitInterval != 300 || *got.Spec.DetectMultiplier != 3 {
		t.Fatalf("BFD defaults: %+v", got.Spec)
	}
}
