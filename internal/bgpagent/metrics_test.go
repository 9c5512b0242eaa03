package bgpagent

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// TestMetrics: an Established session with BFD and one shut for
// maxReceivedPrefixes, as an operator's alert rules read them.
func TestMetrics(t *testing.T) {
	m := &metrics{}
	m.set([]bgpspeaker.SessionState{
		{Peer: "tor-a", Address: netip.MustParseAddr("192.0.2.1"), State: bgpspeaker.StateEstablished, Established: time.Unix(1700000000, 0),
			BFD: bgpspeaker.BFDUp, PrefixesSent: 12, PrefixesReceived: 3},
		{Peer: "tor-b", Address: netip.MustParseAddr("2001:db8::1"), State: bgpspeaker.StateIdle, BFD: bgpspeaker.BFDOff,
			Reason: bgpspeaker.ReasonMaxPrefixesExceeded},
	})
	want := `
# HELP mooring_bgp_bfd_up 1 while the session's BFD is Up, else 0; absent for a peer without a BFD profile.
# TYPE mooring_bgp_bfd_up gauge
mooring_bgp_bfd_up{address="192.0.2.1",peer="tor-a"} 1
# HELP mooring_bgp_prefixes_advertised Prefixes the node advertises on the session (recounted at most every 5 s).
# TYPE mooring_bgp_prefixes_advertised gauge
mooring_bgp_prefixes_advertised{address="192.0.2.1",peer="tor-a"} 12
mooring_bgp_prefixes_advertised{address="2001:db8::1",peer="tor-b"} 0
# HELP mooring_bgp_prefixes_received Prefixes the router sent the node on the session; the node uses none and keeps each in memory (maxReceivedPrefixes bounds them).
# TYPE mooring_bgp_prefixes_received gauge
mooring_bgp_prefixes_received{address="192.0.2.1",peer="tor-a"} 3
mooring_bgp_prefixes_received{address="2001:db8::1",peer="tor-b"} 0
# HELP mooring_bgp_session_down_reason 1 for why a session that is not Established is not (the BGPSpeaker's reason, e.g. AuthFailure, MaxPrefixesExceeded); absent while it is up.
# TYPE mooring_bgp_session_down_reason gauge
mooring_bgp_session_down_reason{address="2001:db8::1",peer="tor-b",reason="MaxPrefixesExceeded"} 1
# HELP mooring_bgp_session_established_timestamp_seconds When the session last came up, Unix seconds; absent while it is down (a change means the session was reset).
# TYPE mooring_bgp_session_established_timestamp_seconds gauge
mooring_bgp_session_established_timestamp_seconds{address="192.0.2.1",peer="tor-a"} 1.7e+09
# HELP mooring_bgp_session_up 1 while the node's BGP session with the peer is Established, else 0.
# TYPE mooring_bgp_session_up gauge
mooring_bgp_session_up{address="192.0.2.1",peer="tor-a"} 1
mooring_bgp_session_up{address="2001:db8::1",peer="tor-b"} 0
`
	if err := testutil.CollectAndCompare(m, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	m.set(nil) // no sessions (BGP off on this node): nothing
	if n := testutil.CollectAndCount(m); n != 0 {
		t.Fatalf("%d metrics without sessions", n)
	}
}
