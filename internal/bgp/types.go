package bgp

import (
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

// Family is an address family of a session.
type Family uint8

const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

// FamilyOf is the family of a.
func FamilyOf(a netip.Addr) Family {
	if a.Unmap().Is4() {
		return IPv4
	}
	return IPv6
}

// DynamicASN restricts a learned peer AS.
type DynamicASN string

const (
	DynamicNone     DynamicASN = ""
	DynamicInternal DynamicASN = "internal"
	DynamicExternal DynamicASN = "external"
)

// Defaults for what a BGPPeer leaves out (docs/bgp.md says why; the API's
// constants in api/v1alpha1 are the same values).
const (
	DefaultHoldTime    = 9 * time.Second
	DefaultConnectTime = 5 * time.Second
	DefaultRestartTime = 120 * time.Second
	DefaultPort        = 179
	// DefaultBFDInterval and DefaultBFDMultiplier are a BFDProfile's
	// defaults: about 900 ms to detect a dead path.
	DefaultBFDInterval   = 300 * time.Millisecond
	DefaultBFDMultiplier = 3
	// DefaultMaxReceived is how many prefixes of one family a session
	// keeps from its router before it is closed (docs/bgp.md, Defaults).
	DefaultMaxReceived = 100000
	// MaxMaxReceived is the largest limit a BGPPeer may set.
	MaxMaxReceived = 100000000
)

// LabelExcludeFromLB on a Node keeps it from advertising anything (its
// sessions stay up), as for L2 and as Kubernetes' service controller does.
const LabelExcludeFromLB = "node.kubernetes.io/exclude-from-external-load-balancers"

// Peer is a BGPPeer as data.
type Peer struct {
	Name string
	// MyASN is the node's AS; PeerASN the router's, 0 to learn it (with
	// Dynamic restricting what is accepted).
	MyASN, PeerASN uint32
	Dynamic        DynamicASN
	Address        netip.Addr
	// Port 0 means DefaultPort.
	Port          uint16
	SourceAddress netip.Addr
	// RouterID, when valid, is the node's BGP identifier.
	RouterID netip.Addr
	// HoldTime, KeepaliveTime, ConnectTime: nil means the default.
	HoldTime, KeepaliveTime, ConnectTime *time.Duration
	// NodeSelectors: a node matching any of them peers; none: every node.
	NodeSelectors []*announce.Selector
	// PasswordSecret names the Secret holding the TCP-MD5 password, "" for
	// none; the adapter reads it.
	PasswordSecret string
	// BFDProfile names a BFDProfile, "" for no BFD.
	BFDProfile string
	// GracefulRestart: RestartTime nil means DefaultRestartTime.
	GracefulRestart bool
	RestartTime     *time.Duration
	// EBGPMultihop is the TTL, 0 or 1 for a directly connected router.
	EBGPMultihop uint8
	// Families the session carries; empty means the family of Address.
	Families []Family
	// MaxReceived limits the prefixes of one family kept from the router:
	// nil means DefaultMaxReceived, 0 no limit.
	MaxReceived *uint32
}

// BFDProfile is a BFDProfile as data; zero fields take the defaults.
type BFDProfile struct {
	Name             string
	ReceiveInterval  time.Duration
	TransmitInterval time.Duration
	DetectMultiplier uint8
}

// Advertisement is a BGPAdvertisement as data.
type Advertisement struct {
	Name string
	// Pools and PoolSelectors select pools; both empty: every address.
	Pools         []string
	PoolSelectors []*announce.Selector
	// ServiceSelectors, NamespaceSelectors, NodeSelectors: any of them
	// must match; none: everything.
	ServiceSelectors   []*announce.Selector
	NamespaceSelectors []*announce.Selector
	NodeSelectors      []*announce.Selector
	// Peers names BGPPeers; empty: every peer.
	Peers []string
	// AggregationLength and AggregationLengthV6: nil means 32 and 128.
	AggregationLength, AggregationLengthV6 *int
	LocalPref                              *uint32
	// Communities are "65000:100", "large:1:2:3" or alias names.
	Communities []string
	// LoadBalancerIPs and ExternalIPs choose the Service addresses.
	LoadBalancerIPs, ExternalIPs bool
}

// CommunityAlias is one name of a BGPCommunity.
type CommunityAlias struct {
	// Object is the BGPCommunity holding it (to name duplicates).
	Object, Name, Value string
}

// Pool is a LoadBalancerIPPool as data: its name, labels and blocks.
type Pool struct {
	Name   string
	Labels map[string]string
	// Ranges are the pool's blocks; CIDR blocks give their whole range.
	Ranges []ipalloc.Range
}

// Node is a Kubernetes Node as data.
type Node struct {
	Name   string
	Labels map[string]string
	// Addresses are its InternalIPs: the default router ID (first IPv4)
	// and the next hop of the family a session does not run on.
	Addresses []netip.Addr
}

// Input is everything one decision needs. Order inside slices does not
// matter: the same sets give the same Result.
type Input struct {
	// Local limits the decision to one node ("" decides for every node,
	// as `mooring status` does).
	Local          string
	Nodes          []Node
	Peers          []Peer
	Advertisements []Advertisement
	Communities    []CommunityAlias
	BFDProfiles    []BFDProfile
	Pools          []Pool
	// Namespaces maps a namespace to its labels (an absent one has none).
	Namespaces map[string]map[string]string
	// Services are shared with the L2 decision; never modified here.
	// Pointers: the caller holds each Service once (at 10,000 Services a
	// copy for every decision was 1 MB).
	Services []*announce.Service
}

// LargeCommunity is an RFC 8092 large community.
type LargeCommunity struct{ Global, Local1, Local2 uint32 }

// Attrs are a route's path attributes besides the next hop. Routes with
// equal attributes share one *Attrs; it must not be modified.
type Attrs struct {
	// Communities (RFC 1997) and Large (RFC 8092), sorted, unique.
	Communities []uint32
	Large       []LargeCommunity
	// LocalPref is sent to iBGP peers when HasLocalPref.
	LocalPref    uint32
	HasLocalPref bool
	// key caches Key for the sets the core builds.
	key string
}

// Route is one prefix a node advertises on one session.
type Route struct {
	Prefix netip.Prefix
	Attrs  *Attrs
}

// BFD is a session's resolved BFD timing.
type BFD struct {
	ReceiveInterval, TransmitInterval time.Duration
	DetectMultiplier                  uint8
}

// Session is one BGP session a node holds, resolved.
type Session struct {
	Peer    string
	Address netip.Addr
	Port    uint16
	// LocalASN is the node's AS on this session; PeerASN 0 learns it.
	LocalASN, PeerASN uint32
	Dynamic           DynamicASN
	SourceAddress     netip.Addr
	HoldTime          time.Duration
	KeepaliveTime     time.Duration
	ConnectTime       time.Duration
	PasswordSecret    string
	// BFD is nil without BFD.
	BFD             *BFD
	GracefulRestart bool
	RestartTime     time.Duration
	EBGPMultihop    uint8
	// Families the session negotiates, sorted.
	Families []Family
	// MaxReceived is the most prefixes of one family kept from the
	// router; one more closes the session. 0: no limit.
	MaxReceived uint32
	// NextHop6 / NextHop4 are set for a family the session carries that is
	// not the family of Address: the node's own address of that family
	// (never a v4-mapped one). Routes of such a family without a next hop
	// are left out and Warnings say so.
	NextHop4, NextHop6 netip.Addr
	// Blocked is set when the session must not be opened on this node;
	// it says why, naming the field and the fix.
	Blocked string
	// Warnings are problems that leave the session up.
	Warnings []string
	// Routes are sorted by prefix.
	Routes []Route
}

// NodeResult is one node's BGP instance.
type NodeResult struct {
	Node     string
	RouterID netip.Addr
	// ASN is the instance's AS: the first session's LocalASN.
	ASN uint32
	// Excluded: the node carries LabelExcludeFromLB and advertises nothing.
	Excluded bool
	// Sessions are sorted by peer name.
	Sessions []Session
}

// Kind names the object a Problem is about.
type Kind string

const (
	KindPeer          Kind = "BGPPeer"
	KindAdvertisement Kind = "BGPAdvertisement"
	KindCommunity     Kind = "BGPCommunity"
)

// Problem is something an operator must fix. Invalid objects are skipped
// (an advertisement advertises nothing, a peer gets no session); the rest
// keeps working.
type Problem struct {
	Kind   Kind
	Object string
	// Field is the offending field, e.g. "spec.communities[2]".
	Field   string
	Message string
	// Invalid: the object is not used at all; otherwise a warning.
	Invalid bool
}

// Result is the decision.
type Result struct {
	// Nodes are sorted by name: only Input.Local when it is set.
	Nodes    []NodeResult
	Problems []Problem
}

// Node returns the result for name.
func (r Result) Node(name string) (NodeResult, bool) {
	for _, n := range r.Nodes {
		if n.Node == name {
			return n, true
		}
	}
	return NodeResult{}, false
}
