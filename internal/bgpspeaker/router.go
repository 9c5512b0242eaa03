package bgpspeaker

import (
	"context"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/bgp"
)

// Router is the seam between the speaker and a BGP implementation: GoBGP
// (gobgp.go) today, another backend later. It speaks in the core's terms;
// all calls come from one goroutine (the Speaker's).
type Router interface {
	// Start starts the instance. It is called once before anything else
	// and again after Stop when the router ID or AS changes.
	Start(ctx context.Context, g Global) error
	// Stop closes every session. Graceful leaves without a NOTIFICATION
	// (Cease), so routers that negotiated graceful restart keep this
	// node's routes for the restart time.
	Stop(ctx context.Context, graceful bool) error
	// AddPeer opens a session; restarting marks it as the restarting
	// speaker's (RFC 4724 Restart State and Forwarding State bits): the
	// router keeps its stale routes until this node's End-of-RIB.
	AddPeer(ctx context.Context, p PeerConfig, restarting bool) error
	// UpdatePeer changes a session in place; the backend resets it only
	// when the change needs a new OPEN (ASNs, password, families, graceful
	// restart).
	UpdatePeer(ctx context.Context, p PeerConfig) error
	// DeletePeer closes a session and forgets its routes.
	DeletePeer(ctx context.Context, name string) error
	// Announce adds or replaces routes on one session.
	Announce(ctx context.Context, peer string, routes []Path) error
	// Withdraw removes routes from one session.
	Withdraw(ctx context.Context, peer string, routes []Path) error
	// Sessions reports every session's state.
	Sessions(ctx context.Context) ([]SessionState, error)
}

// Global is the instance's identity.
type Global struct {
	ASN      uint32
	RouterID netip.Addr
	// ListenPort is where it accepts sessions; <= 0 does not listen (the
	// node opens every session itself, and port 179 stays free for other
	// daemons on the host).
	ListenPort int
}

// PeerConfig is one session as the backend needs it: the core's session
// plus what the adapter resolved (the password).
type PeerConfig struct {
	bgp.Session
	// Password is the TCP-MD5 password, "" for none.
	Password string
}

// Path is one route with its next hop: zero means "the session's own
// address" (the backend fills it in); set only for the family a session
// does not run on.
type Path struct {
	bgp.Route
	NextHop netip.Addr
}

// SessionState is what the backend knows about one session.
type SessionState struct {
	Peer    string
	Address netip.Addr
	State   State
	// PeerASN is the router's AS as configured or learned.
	PeerASN uint32
	// Reason and Message describe the last failure (Reason* constants).
	Reason, Message string
	// Since is when State last changed; Established when the session came
	// up (zero when it is not up).
	Since, Established time.Time
	BFD                State
	// Negotiated values of an established session.
	HoldTime, KeepaliveTime time.Duration
	Families                []bgp.Family
	GracefulRestart         bool
	// PrefixesSent and PrefixesReceived count prefixes on the session.
	PrefixesSent, PrefixesReceived int64
}

// State is a BGP or BFD session state, spelled as in the API.
type State string

const (
	StateIdle        State = "Idle"
	StateConnect     State = "Connect"
	StateActive      State = "Active"
	StateOpenSent    State = "OpenSent"
	StateOpenConfirm State = "OpenConfirm"
	StateEstablished State = "Established"

	BFDOff       State = "Off"
	BFDAdminDown State = "AdminDown"
	BFDDown      State = "Down"
	BFDInit      State = "Init"
	BFDUp        State = "Up"
)

// Reasons a session is not Established; the same strings as the API's
// BGPReason* constants (a test keeps them equal).
const (
	ReasonAuthFailure          = "AuthFailure"
	ReasonPeerASMismatch       = "PeerASMismatch"
	ReasonHoldTimerExpired     = "HoldTimerExpired"
	ReasonBFDDown              = "BFDDown"
	ReasonConnectRefused       = "ConnectRefused"
	ReasonNoRoute              = "NoRoute"
	ReasonOpenMessageError     = "OpenMessageError"
	ReasonConnectTimeout       = "ConnectTimeout"
	ReasonNotificationReceived = "NotificationReceived"
	ReasonInvalidMessage       = "InvalidMessage"
	ReasonConnectionClosed     = "ConnectionClosed"
	ReasonPasswordUnavailable  = "PasswordUnavailable"
	ReasonMD5Unsupported       = "MD5Unsupported"
	ReasonInvalidConfig        = "InvalidConfig"
	ReasonMaxPrefixesExceeded  = "MaxPrefixesExceeded"
	ReasonConnecting           = "Connecting"
)
