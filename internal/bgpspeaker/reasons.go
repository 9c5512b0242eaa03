package bgpspeaker

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// downKind is why an established session last went down, as the backend
// reports it.
type downKind int

const (
	downNone downKind = iota
	downHoldTimer
	downNotificationSent
	downNotificationReceived
	downClosed // read or write failed: the TCP connection closed
	downInvalidMessage
	downBadPeerAS
	downOther
)

// observation is what is known about a session that is not Established.
type observation struct {
	peer        string
	address     netip.Addr
	down        downKind
	downMessage string // e.g. "notification-received code 2(open) subcode 2(bad peer as)"
	connErr     string // the last dial error
	hasPassword bool
	bfdFailed   bool   // BFD declared the path down since the session was last up
	asMismatch  string // set when a learned AS broke dynamicASN
	probe       ProbeResult
	link        LinkState
}

// ProbeResult is what an unsigned probe of the router found while signed
// connection attempts time out.
type ProbeResult int

const (
	ProbeNotRun ProbeResult = iota
	// ProbeAnswered: the router accepted a plain TCP connection.
	ProbeAnswered
	// ProbeRefused: the router answered with a RST.
	ProbeRefused
	// ProbeSilent: no answer.
	ProbeSilent
)

// LinkState is what the kernel's neighbour table says about an address.
type LinkState int

const (
	// LinkUnknown: no entry (not on a connected link, or not tried yet).
	LinkUnknown LinkState = iota
	// LinkReachable: the router answered ARP/NDP.
	LinkReachable
	// LinkFailed: ARP/NDP for the router got no answer.
	LinkFailed
)

// Prober tells apart why connection attempts time out: a password
// mismatch (the router's kernel drops TCP-MD5 segments with a wrong or
// unexpected signature without a word), a router that is not there, or
// one that filters BGP.
type Prober interface {
	// Probe opens (and closes) one plain, unsigned TCP connection.
	Probe(ctx context.Context, peer, source netip.Addr, port uint16) ProbeResult
	// Link reads the neighbour table entry of peer.
	Link(peer netip.Addr) LinkState
}

// classify names the reason a session is not Established and what to
// do about it. Cost: O(len(messages)).
func classify(o observation) (reason, message string) {
	switch {
	case o.asMismatch != "":
		return ReasonPeerASMismatch, o.asMismatch
	case o.down == downBadPeerAS:
		return ReasonPeerASMismatch, fmt.Sprintf("the router %s named an AS in its OPEN that peerASN (or dynamicASN) does not allow: set peerASN to the router's AS", o.address)
	case o.bfdFailed && o.down != downNone:
		return ReasonBFDDown, fmt.Sprintf("BFD declared the path to %s down and the session was reset; it comes back when BFD and BGP do", o.address)
	}
	if r, m, ok := classifyDown(o); ok {
		return r, m
	}
	return classifyConnect(o)
}

func classifyDown(o observation) (string, string, bool) {
	msg := o.downMessage
	switch o.down {
	case downHoldTimer:
		return ReasonHoldTimerExpired, fmt.Sprintf("no KEEPALIVE from %s within the hold time: the router or the path to it stalled", o.address), true
	case downNotificationReceived:
		switch {
		case strings.Contains(msg, "(open)") && strings.Contains(msg, "(bad peer as)"):
			return ReasonPeerASMismatch, fmt.Sprintf("the router %s refused this node's AS (%s): set myASN to the AS the router expects, or fix the router's neighbor remote-as", o.address, msg), true
		case strings.Contains(msg, "(open)"):
			return ReasonOpenMessageError, fmt.Sprintf("the router %s refused the OPEN (%s): compare router ID, hold time and address families with its configuration", o.address, msg), true
		}
		return ReasonNotificationReceived, fmt.Sprintf("the router %s closed the session: %s", o.address, msg), true
	case downNotificationSent, downInvalidMessage:
		switch {
		case strings.Contains(msg, "(open)"):
			return ReasonOpenMessageError, fmt.Sprintf("the router's OPEN was refused (%s): compare its router ID, hold time and capabilities", msg), true
		case strings.Contains(msg, "(header)") || strings.Contains(msg, "(update)") || o.down == downInvalidMessage:
			return ReasonInvalidMessage, fmt.Sprintf("the router %s sent a malformed message (%s); the session was closed and is retried", o.address, msg), true
		}
		return ReasonNotificationReceived, fmt.Sprintf("the session with %s was closed: %s", o.address, msg), true
	case downClosed:
		return ReasonConnectionClosed, fmt.Sprintf("the router %s closed the TCP connection without a NOTIFICATION", o.address), true
	}
	return "", "", false
}

func classifyConnect(o observation) (string, string) {
	e := strings.ToLower(o.connErr)
	switch {
	case e == "":
		return ReasonConnecting, fmt.Sprintf("connecting to %s", o.address)
	case o.hasPassword && (strings.Contains(e, "setsockopt") || strings.Contains(e, "protocol not available")):
		return ReasonMD5Unsupported, fmt.Sprintf("the kernel refused TCP-MD5 for %s (%s): the session stays closed (never unauthenticated); keep the password at most 80 bytes and the kernel built with CONFIG_TCP_MD5SIG, or remove passwordSecret", o.address, o.connErr)
	case strings.Contains(e, "connection refused"):
		return ReasonConnectRefused, fmt.Sprintf("%s refused the connection: nothing listens on the BGP port, or the router has no neighbor (or listen range) for this node", o.address)
	case strings.Contains(e, "no route to host") || strings.Contains(e, "network is unreachable") || strings.Contains(e, "cannot assign requested address"):
		return ReasonNoRoute, fmt.Sprintf("no route from this node to %s (%s): check sourceAddress and the node's routes", o.address, o.connErr)
	case strings.Contains(e, "timeout") || strings.Contains(e, "timed out"):
		return classifyTimeout(o)
	}
	return ReasonConnecting, fmt.Sprintf("connecting to %s failed: %s", o.address, o.connErr)
}

// classifyTimeout: a signed SYN that gets no answer is what a password
// mismatch looks like (the router's kernel drops it), unless the router
// is not there at all.
func classifyTimeout(o observation) (string, string) {
	if o.link == LinkFailed {
		return ReasonNoRoute, fmt.Sprintf("%s does not answer ARP/NDP on the node's link: the router is down or the address is wrong", o.address)
	}
	if !o.hasPassword {
		return ReasonConnectTimeout, fmt.Sprintf("%s does not answer: the router is down, a firewall drops BGP, or the router has a TCP-MD5 password this peer lacks", o.address)
	}
	switch {
	case o.probe == ProbeAnswered:
		return ReasonAuthFailure, fmt.Sprintf("%s accepts TCP without TCP-MD5 but drops this node's signed SYNs: the router has no password for this node; set the same password there", o.address)
	case o.probe == ProbeSilent && o.link == LinkReachable:
		return ReasonAuthFailure, fmt.Sprintf("%s is on the link but drops this node's TCP-MD5-signed SYNs: the passwords differ; set the same password on both ends", o.address)
	case o.probe == ProbeRefused:
		return ReasonConnectRefused, fmt.Sprintf("%s refuses connections on the BGP port (its unsigned RST is ignored by a TCP-MD5 socket): check the router's neighbor configuration", o.address)
	}
	return ReasonConnectTimeout, fmt.Sprintf("%s does not answer TCP-MD5-signed SYNs: a password mismatch, or the router is down or filtered", o.address)
}

// probeEvery bounds authentication probes per peer.
const probeEvery = 30 * time.Second
