package frr

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// This file turns vtysh's JSON (FRR 8.4) into netip types. The parsers are
// pure; the Instance methods that run vtysh live in frr_linux.go.

// Route is one entry of zebra's RIB for a prefix (`show ip route json`).
type Route struct {
	Prefix    netip.Prefix
	Protocol  string // "bgp", "connected", "kernel", ...
	Selected  bool   // zebra's choice for the prefix
	Installed bool   // in the kernel's table
	Nexthops  []Nexthop
}

// Nexthop is one next hop of a route.
type Nexthop struct {
	Addr      netip.Addr // invalid for a directly connected route
	Interface string
	Active    bool // usable
	FIB       bool // installed in the kernel
}

// RIB is zebra's table of one family: every route entry per prefix.
type RIB map[netip.Prefix][]Route

// Installed returns the addresses of the FIB next hops of p's selected,
// installed route of protocol proto ("" for any), sorted; nil when there
// is none. With ECMP there is one per path.
func (r RIB) Installed(p netip.Prefix, proto string) []netip.Addr {
	var out []netip.Addr
	for _, rt := range r[p] {
		if !rt.Selected || !rt.Installed || proto != "" && rt.Protocol != proto {
			continue
		}
		for _, nh := range rt.Nexthops {
			if nh.FIB && nh.Addr.IsValid() {
				out = append(out, nh.Addr)
			}
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// ParseRIB parses `show ip route json` or `show ipv6 route json`.
func ParseRIB(b []byte) (RIB, error) {
	var raw map[string][]struct {
		Prefix    string `json:"prefix"`
		Protocol  string `json:"protocol"`
		Selected  bool   `json:"selected"`
		Installed bool   `json:"installed"`
		Nexthops  []struct {
			IP        string `json:"ip"`
			Interface string `json:"interfaceName"`
			Active    bool   `json:"active"`
			FIB       bool   `json:"fib"`
		} `json:"nexthops"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("frr: parsing the route table: %w", err)
	}
	rib := RIB{}
	for key, entries := range raw {
		p, err := netip.ParsePrefix(key)
		if err != nil {
			return nil, fmt.Errorf("frr: route table: prefix %q: %w", key, err)
		}
		for _, e := range entries {
			rt := Route{Prefix: p, Protocol: e.Protocol, Selected: e.Selected, Installed: e.Installed}
			for _, nh := range e.Nexthops {
				n := Nexthop{Interface: nh.Interface, Active: nh.Active, FIB: nh.FIB}
				if nh.IP != "" {
					if n.Addr, err = netip.ParseAddr(nh.IP); err != nil {
						return nil, fmt.Errorf("frr: route %s: next hop %q: %w", key, nh.IP, err)
					}
				}
				rt.Nexthops = append(rt.Nexthops, n)
			}
			rib[p] = append(rib[p], rt)
		}
	}
	return rib, nil
}

// Path is one BGP path of a prefix as the router holds it
// (`show bgp <family> unicast [<prefix>] json`).
type Path struct {
	Peer      netip.Addr // the neighbour it came from; invalid for local paths
	Nexthops  []netip.Addr
	Valid     bool
	Best      bool
	Multipath bool
	Stale     bool // kept for a restarting peer (graceful restart)
	ASPath    string
	// LocalPref, Communities and LargeCommunities are filled only by the
	// per-prefix query (BGPPrefix); FRR 8.4 leaves them out of the table.
	LocalPref        uint32
	Communities      []string // "64500:100", or well-known names such as "no-export"
	LargeCommunities []string // "64500:1:2"
}

// BGPTable is the BGP RIB of one family: every path per prefix.
type BGPTable map[netip.Prefix][]Path

type rawPath struct {
	Valid bool `json:"valid"`
	// true in the table, {"overall": true, ...} per prefix.
	Best      json.RawMessage `json:"bestpath"`
	Multipath bool            `json:"multipath"`
	Stale     bool            `json:"stale"`
	PeerID    string          `json:"peerId"`
	Path      string          `json:"path"`
	LocPrf    uint32          `json:"locPrf"`
	Nexthops  []struct {
		IP string `json:"ip"`
	} `json:"nexthops"`
	// Per-prefix output only.
	ASPath *struct {
		String string `json:"string"`
	} `json:"aspath"`
	Peer *struct {
		PeerID string `json:"peerId"`
	} `json:"peer"`
	Community *struct {
		String string `json:"string"`
	} `json:"community"`
	LargeCommunity *struct {
		String string `json:"string"`
	} `json:"largeCommunity"`
}

func (r *rawPath) path() (Path, error) {
	p := Path{Valid: r.Valid, Best: isBest(r.Best), Multipath: r.Multipath, Stale: r.Stale, ASPath: r.Path, LocalPref: r.LocPrf}
	peer := r.PeerID
	if r.Peer != nil {
		peer = r.Peer.PeerID
	}
	if r.ASPath != nil {
		p.ASPath = r.ASPath.String
	}
	if a, err := netip.ParseAddr(peer); err == nil {
		p.Peer = a
	}
	for _, nh := range r.Nexthops {
		a, err := netip.ParseAddr(nh.IP)
		if err != nil {
			return Path{}, fmt.Errorf("frr: BGP path: next hop %q: %w", nh.IP, err)
		}
		p.Nexthops = append(p.Nexthops, a)
	}
	if r.Community != nil {
		p.Communities = strings.Fields(r.Community.String)
	}
	if r.LargeCommunity != nil {
		p.LargeCommunities = strings.Fields(r.LargeCommunity.String)
	}
	return p, nil
}

// isBest reads FRR's "bestpath": a bool in the table, an object with
// "overall" per prefix.
func isBest(raw json.RawMessage) bool {
	var b bool
	if json.Unmarshal(raw, &b) == nil {
		return b
	}
	var o struct {
		Overall bool `json:"overall"`
	}
	return json.Unmarshal(raw, &o) == nil && o.Overall
}

// ParseBGPTable parses `show bgp ipv4|ipv6 unicast json`.
func ParseBGPTable(b []byte) (BGPTable, error) {
	var raw struct {
		Routes map[string][]rawPath `json:"routes"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("frr: parsing the BGP table: %w", err)
	}
	t := BGPTable{}
	for key, paths := range raw.Routes {
		p, err := netip.ParsePrefix(key)
		if err != nil {
			return nil, fmt.Errorf("frr: BGP table: prefix %q: %w", key, err)
		}
		for i := range paths {
			path, err := paths[i].path()
			if err != nil {
				return nil, err
			}
			t[p] = append(t[p], path)
		}
	}
	return t, nil
}

// ParseBGPPrefix parses `show bgp ipv4|ipv6 unicast <prefix> json`: every
// path of one prefix with its attributes; nil when the router has none.
func ParseBGPPrefix(b []byte) ([]Path, error) {
	var raw struct {
		Paths []rawPath `json:"paths"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("frr: parsing a BGP prefix: %w", err)
	}
	var out []Path
	for i := range raw.Paths {
		p, err := raw.Paths[i].path()
		if err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

// Session is one BGP neighbour's session as the router sees it
// (`show bgp neighbors json`).
type Session struct {
	Addr        netip.Addr
	RemoteAS    uint32
	LocalAS     uint32
	State       string // "Established", "Active", "Connect", "Idle", ...
	Dynamic     bool   // accepted through a listen range
	PeerGroup   string
	RemoteID    netip.Addr
	Hostname    string // from the peer's hostname capability
	Uptime      time.Duration
	Established time.Time // when the session last came up (whole seconds)
	// ConnectionsEstablished and ConnectionsDropped count the session's
	// ups and downs since the neighbour was configured: a reset shows as a
	// step in both (and in Uptime).
	ConnectionsEstablished int
	ConnectionsDropped     int
	Messages               MessageStats
	HoldTime, Keepalive    time.Duration // negotiated
	LastResetReason        string
	// LastNotification is the last NOTIFICATION's reason when the last
	// reset sent or received one ("Cease/BFD Down": FRR sends a Cease
	// with RFC 9384's subcode when BFD takes a session down).
	LastNotification string
	// AcceptedPrefixes and SentPrefixes count prefixes per family.
	AcceptedPrefixes map[Family]int
	SentPrefixes     map[Family]int
	// EndOfRIBReceived is true per family once the peer sent End-of-RIB.
	EndOfRIBReceived map[Family]bool
	// RemoteGRMode is the peer's graceful-restart mode ("Restart",
	// "Helper", "Disable"), as FRR reports it.
	RemoteGRMode string
	// BFDStatus is "Up", "Down", ... or "" without BFD.
	BFDStatus string
}

// MessageStats counts the session's BGP messages.
type MessageStats struct {
	OpensSent, OpensRecv                 int
	NotificationsSent, NotificationsRecv int
	UpdatesSent, UpdatesRecv             int
	KeepalivesSent, KeepalivesRecv       int
}

type rawNeighbor struct {
	RemoteAS          uint32 `json:"remoteAs"`
	LocalAS           uint32 `json:"localAs"`
	State             string `json:"bgpState"`
	PeerGroup         string `json:"peerGroup"`
	SubnetRange       string `json:"peerSubnetRangeGroup"`
	RemoteRouterID    string `json:"remoteRouterId"`
	Hostname          string `json:"hostname"`
	UpMsec            int64  `json:"bgpTimerUpMsec"`
	UpEpoch           int64  `json:"bgpTimerUpEstablishedEpoch"`
	HoldMsec          int64  `json:"bgpTimerHoldTimeMsecs"`
	KeepaliveMsec     int64  `json:"bgpTimerKeepAliveIntervalMsecs"`
	ConnsEstablished  int    `json:"connectionsEstablished"`
	ConnsDropped      int    `json:"connectionsDropped"`
	LastResetDueTo    string `json:"lastResetDueTo"`
	LastNotification  string `json:"lastNotificationReason"`
	GracefulRestartOf struct {
		RemoteGrMode string `json:"remoteGrMode"`
		EndOfRibRecv struct {
			IPv4 bool `json:"ipv4Unicast"`
			IPv6 bool `json:"ipv6Unicast"`
		} `json:"endOfRibRecv"`
	} `json:"gracefulRestartInfo"`
	MessageStats struct {
		OpensSent         int `json:"opensSent"`
		OpensRecv         int `json:"opensRecv"`
		NotificationsSent int `json:"notificationsSent"`
		NotificationsRecv int `json:"notificationsRecv"`
		UpdatesSent       int `json:"updatesSent"`
		UpdatesRecv       int `json:"updatesRecv"`
		KeepalivesSent    int `json:"keepalivesSent"`
		KeepalivesRecv    int `json:"keepalivesRecv"`
	} `json:"messageStats"`
	AFI map[string]struct {
		Accepted int `json:"acceptedPrefixCounter"`
		Sent     int `json:"sentPrefixCounter"`
	} `json:"addressFamilyInfo"`
	BFD *struct {
		Status string `json:"status"`
	} `json:"peerBfdInfo"`
}

// afiFamily maps FRR's address-family keys to Family.
var afiFamily = map[string]Family{"ipv4Unicast": IPv4, "ipv6Unicast": IPv6}

// ParseSessions parses `show bgp neighbors json`, keyed by the neighbour's
// address. Neighbours configured by name (peer groups) are skipped.
func ParseSessions(b []byte) (map[netip.Addr]Session, error) {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("frr: parsing neighbours: %w", err)
	}
	out := map[netip.Addr]Session{}
	for key, msg := range raw {
		addr, err := netip.ParseAddr(key)
		if err != nil {
			continue
		}
		var r rawNeighbor
		if err := json.Unmarshal(msg, &r); err != nil {
			return nil, fmt.Errorf("frr: neighbour %s: %w", key, err)
		}
		out[addr] = r.session(addr)
	}
	return out, nil
}

func (r *rawNeighbor) session(addr netip.Addr) Session {
	m := r.MessageStats
	n := Session{
		Addr: addr, RemoteAS: r.RemoteAS, LocalAS: r.LocalAS, State: r.State,
		Dynamic: r.SubnetRange != "", PeerGroup: r.PeerGroup, Hostname: r.Hostname,
		Uptime:                 time.Duration(r.UpMsec) * time.Millisecond,
		ConnectionsEstablished: r.ConnsEstablished, ConnectionsDropped: r.ConnsDropped,
		HoldTime:        time.Duration(r.HoldMsec) * time.Millisecond,
		Keepalive:       time.Duration(r.KeepaliveMsec) * time.Millisecond,
		LastResetReason: r.LastResetDueTo, LastNotification: r.LastNotification,
		Messages: MessageStats{
			OpensSent: m.OpensSent, OpensRecv: m.OpensRecv,
			NotificationsSent: m.NotificationsSent, NotificationsRecv: m.NotificationsRecv,
			UpdatesSent: m.UpdatesSent, UpdatesRecv: m.UpdatesRecv,
			KeepalivesSent: m.KeepalivesSent, KeepalivesRecv: m.KeepalivesRecv,
		},
		AcceptedPrefixes: map[Family]int{}, SentPrefixes: map[Family]int{},
		EndOfRIBReceived: map[Family]bool{
			IPv4: r.GracefulRestartOf.EndOfRibRecv.IPv4, IPv6: r.GracefulRestartOf.EndOfRibRecv.IPv6,
		},
		RemoteGRMode: r.GracefulRestartOf.RemoteGrMode,
	}
	if r.State == "Established" && r.UpEpoch > 0 {
		n.Established = time.Unix(r.UpEpoch, 0)
	}
	if id, err := netip.ParseAddr(r.RemoteRouterID); err == nil {
		n.RemoteID = id
	}
	for k, v := range r.AFI {
		if f, ok := afiFamily[k]; ok {
			n.AcceptedPrefixes[f], n.SentPrefixes[f] = v.Accepted, v.Sent
		}
	}
	if r.BFD != nil {
		n.BFDStatus = r.BFD.Status
	}
	return n
}

// BFDPeer is one BFD session (`show bfd peers json`).
type BFDPeer struct {
	Peer, Local netip.Addr
	Interface   string
	Status      string // "up", "down", "init", "shutdown"
	// Uptime is set while up, Downtime while not.
	Uptime, Downtime          time.Duration
	Diagnostic, RemoteDiag    string
	ReceiveInterval, Transmit time.Duration
	DetectMultiplier          int
	RemoteReceive             time.Duration
	RemoteTransmit            time.Duration
	RemoteDetectMultiplier    int
}

// ParseBFDPeers parses `show bfd peers json`.
func ParseBFDPeers(b []byte) ([]BFDPeer, error) {
	var raw []struct {
		Peer       string `json:"peer"`
		Local      string `json:"local"`
		Interface  string `json:"interface"`
		Status     string `json:"status"`
		Uptime     int64  `json:"uptime"`
		Downtime   int64  `json:"downtime"`
		Diagnostic string `json:"diagnostic"`
		RemoteDiag string `json:"remote-diagnostic"`
		Rx         int64  `json:"receive-interval"`
		Tx         int64  `json:"transmit-interval"`
		Mult       int    `json:"detect-multiplier"`
		RemoteRx   int64  `json:"remote-receive-interval"`
		RemoteTx   int64  `json:"remote-transmit-interval"`
		RemoteMult int    `json:"remote-detect-multiplier"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("frr: parsing BFD peers: %w", err)
	}
	out := make([]BFDPeer, 0, len(raw))
	for _, r := range raw {
		p := BFDPeer{
			Interface: r.Interface, Status: r.Status,
			Uptime: time.Duration(r.Uptime) * time.Second, Downtime: time.Duration(r.Downtime) * time.Second,
			Diagnostic: r.Diagnostic, RemoteDiag: r.RemoteDiag,
			ReceiveInterval: ms(r.Rx), Transmit: ms(r.Tx), DetectMultiplier: r.Mult,
			RemoteReceive: ms(r.RemoteRx), RemoteTransmit: ms(r.RemoteTx), RemoteDetectMultiplier: r.RemoteMult,
		}
		var err error
		if p.Peer, err = netip.ParseAddr(r.Peer); err != nil {
			return nil, fmt.Errorf("frr: BFD peer %q: %w", r.Peer, err)
		}
		if r.Local != "" {
			if p.Local, err = netip.ParseAddr(r.Local); err != nil {
				return nil, fmt.Errorf("frr: BFD peer %s: local address %q: %w", r.Peer, r.Local, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func ms(v int64) time.Duration { return time.Duration(v) * time.Millisecond }
