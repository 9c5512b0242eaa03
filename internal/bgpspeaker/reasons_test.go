package bgpspeaker

import (
	"net/netip"
	"strings"
	"testing"
)

func TestClassify(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	cases := []struct {
		name   string
		o      observation
		reason string
		msg    string
	}{
		{"nothing yet", observation{}, ReasonConnecting, "connecting"},
		{"dynamicASN", observation{asMismatch: "learned 1"}, ReasonPeerASMismatch, "learned 1"},
		{"we refused its AS", observation{down: downBadPeerAS}, ReasonPeerASMismatch, "set peerASN"},
		{"it refused ours", observation{down: downNotificationReceived, downMessage: "notification-received code 2(open) subcode 2(bad peer as)"}, ReasonPeerASMismatch, "set myASN"},
		{"it refused the OPEN otherwise", observation{down: downNotificationReceived, downMessage: "notification-received code 2(open) subcode 6(unacceptable hold time)"}, ReasonOpenMessageError, "hold time"},
		{"we refused its OPEN", observation{down: downNotificationSent, downMessage: "notification-sent code 2(open) subcode 3(bad bgp identifier)"}, ReasonOpenMessageError, "router ID"},
		{"garbage header", observation{down: downNotificationSent, downMessage: "notification-sent code 1(header) subcode 2(bad message length)"}, ReasonInvalidMessage, "malformed"},
		{"invalid message", observation{down: downInvalidMessage, downMessage: "invalid-msg"}, ReasonInvalidMessage, "malformed"},
		{"cease from the router", observation{down: downNotificationReceived, downMessage: "notification-received code 6(cease) subcode 2(administrative shutdown)"}, ReasonNotificationReceived, "administrative shutdown"},
		{"hold timer", observation{down: downHoldTimer}, ReasonHoldTimerExpired, "hold time"},
		{"BFD reset the session", observation{down: downNotificationSent, downMessage: "notification-sent code 6(cease) subcode 4(administrative reset)", bfdFailed: true}, ReasonBFDDown, "BFD"},
		{"closed", observation{down: downClosed}, ReasonConnectionClosed, "without a NOTIFICATION"},
		{"refused", observation{connErr: "dial tcp 192.0.2.1:179: connect: connection refused"}, ReasonConnectRefused, "refused"},
		{"no route", observation{connErr: "dial tcp 192.0.2.1:179: connect: no route to host"}, ReasonNoRoute, "no route"},
		{"unreachable net", observation{connErr: "connect: network is unreachable"}, ReasonNoRoute, "no route"},
		{"source not held", observation{connErr: "bind: cannot assign requested address"}, ReasonNoRoute, "sourceAddress"},
		{"md5 refused", observation{connErr: "setSockOpt: protocol not available", hasPassword: true}, ReasonMD5Unsupported, "never unauthenticated"},
		{"timeout, ARP failed", observation{connErr: "i/o timeout", link: LinkFailed}, ReasonNoRoute, "ARP/NDP"},
		{"timeout without password", observation{connErr: "i/o timeout"}, ReasonConnectTimeout, "does not answer"},
		{"timeout, router answers unsigned", observation{connErr: "i/o timeout", hasPassword: true, probe: ProbeAnswered}, ReasonAuthFailure, "no password for this node"},
		{"timeout, router on the link", observation{connErr: "i/o timeout", hasPassword: true, probe: ProbeSilent, link: LinkReachable}, ReasonAuthFailure, "passwords differ"},
		{"timeout, router refuses", observation{connErr: "i/o timeout", hasPassword: true, probe: ProbeRefused}, ReasonConnectRefused, "refuses"},
		{"timeout, nothing known", observation{connErr: "i/o timeout", hasPassword: true, probe: ProbeSilent}, ReasonConnectTimeout, "password mismatch"},
		{"unknown dial error", observation{connErr: "something odd"}, ReasonConnecting, "something odd"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.o.address = a
			r, m := classify(tc.o)
			if r != tc.reason || !strings.Contains(m, tc.msg) {
				t.Fatalf("classify = %s %q, want %s containing %q", r, m, tc.reason, tc.msg)
			}
		})
	}
}

// TestNotificationBFD: besides the node's own BFD failures, a BFD reset
// is known by its NOTIFICATION: the node's Cease (administrative reset,
// "BFD is down") or the router's Cease/BFD Down (RFC 9384); an operator's
// reset or shutdown is not one.
func TestNotificationBFD(t *testing.T) {
	cases := []struct {
		n    notification
		want bool
	}{
		{notification{sent: true, code: 6, subcode: 4, communication: "BFD is down"}, true},
		{notification{sent: false, code: 6, subcode: 10}, true},
		{notification{sent: true, code: 6, subcode: 10}, true},
		{notification{sent: true, code: 6, subcode: 4}, false},
		{notification{sent: false, code: 6, subcode: 4, communication: "BFD is down"}, false},
		{notification{sent: true, code: 6, subcode: 2, communication: "BFD is down"}, false},
		{notification{sent: true, code: 4, subcode: 0}, false},
	}
	for _, c := range cases {
		if got := c.n.bfd(); got != c.want {
			t.Errorf("%+v: bfd() = %v, want %v", c.n, got, c.want)
		}
	}
}
