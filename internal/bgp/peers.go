package bgp

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net/netip"
	"slices"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
)

// peer is a validated BGPPeer with what resolving it found.
type peer struct {
	*Peer
	bfd        *BFD
	warnings   []string
	families   []Family
	hold       time.Duration
	keepalive  time.Duration
	connect    time.Duration
	restart    time.Duration
	maxRecv    uint32
	validation error
}

// validatePeers checks what admission cannot (or what arrives without
// admission) and resolves defaults and BFD profiles. Invalid peers get no
// session anywhere. Cost: O(P log P + B).
func validatePeers(in []Peer, profiles []BFDProfile) ([]*peer, []Problem) {
	byName := map[string]*BFDProfile{}
	for i := range profiles {
		byName[profiles[i].Name] = &profiles[i]
	}
	var out []*peer
	var problems []Problem
	for i := range in {
		p := &peer{Peer: &in[i]}
		if field, err := p.validate(); err != nil {
			problems = append(problems, Problem{Kind: KindPeer, Object: p.Name, Field: field, Message: err.Error(), Invalid: true})
			continue
		}
		p.resolveBFD(byName)
		for _, w := range p.warnings {
			problems = append(problems, Problem{Kind: KindPeer, Object: p.Name, Field: "spec.bfdProfile", Message: w})
		}
		out = append(out, p)
	}
	slices.SortFunc(out, func(a, b *peer) int { return cmp.Compare(a.Name, b.Name) })
	return out, problems
}

func durationOr(d *time.Duration, def time.Duration) time.Duration {
	if d == nil {
		return def
	}
	return *d
}

// validate resolves timers and families and returns the first offending
// field with a message naming the fix.
func (p *peer) validate() (string, error) {
	switch {
	case p.MyASN == 0:
		return "spec.myASN", fmt.Errorf("myASN must be an AS number 1-4294967294")
	case !p.Address.IsValid() || p.Address.IsUnspecified() || p.Address.IsLoopback() || p.Address.IsMulticast() || p.Address.IsLinkLocalUnicast():
		return "spec.peerAddress", fmt.Errorf("peerAddress %s must be a unicast address of the router (not loopback, link-local or multicast)", p.Address)
	case p.Dynamic != DynamicNone && p.PeerASN != 0:
		return "spec.dynamicASN", fmt.Errorf("peerASN and dynamicASN are mutually exclusive: remove one")
	case p.Dynamic != DynamicNone && p.Dynamic != DynamicInternal && p.Dynamic != DynamicExternal:
		return "spec.dynamicASN", fmt.Errorf("dynamicASN %q: use internal or external", p.Dynamic)
	case p.SourceAddress.IsValid() && FamilyOf(p.SourceAddress) != FamilyOf(p.Address):
		return "spec.sourceAddress", fmt.Errorf("sourceAddress %s is not of the family of peerAddress %s", p.SourceAddress, p.Address)
	case p.RouterID.IsValid() && !p.RouterID.Unmap().Is4():
		return "spec.routerID", fmt.Errorf("routerID %s must be an IPv4 address", p.RouterID)
	case p.MaxReceived != nil && *p.MaxReceived > MaxMaxReceived:
		return "spec.maxReceivedPrefixes", fmt.Errorf("maxReceivedPrefixes %d is over %d: configure the router to send the nodes nothing, or 0 for no limit", *p.MaxReceived, MaxMaxReceived)
	}
	p.maxRecv = DefaultMaxReceived
	if p.MaxReceived != nil {
		p.maxRecv = *p.MaxReceived
	}
	for i, s := range p.NodeSelectors {
		if err := s.Validate(); err != nil {
			return fmt.Sprintf("spec.nodeSelectors[%d]", i), fmt.Errorf("%w: fix the selector", err)
		}
	}
	if field, err := p.resolveTimers(); err != nil {
		return field, err
	}
	return p.resolveFamilies()
}

func (p *peer) resolveTimers() (string, error) {
	p.hold = durationOr(p.HoldTime, DefaultHoldTime)
	p.keepalive = durationOr(p.KeepaliveTime, max(time.Second, (p.hold/3).Truncate(time.Second)))
	p.connect = durationOr(p.ConnectTime, DefaultConnectTime)
	p.restart = durationOr(p.RestartTime, DefaultRestartTime)
	whole := func(d time.Duration) bool { return d%time.Second == 0 }
	switch {
	case !whole(p.hold) || p.hold < 3*time.Second || p.hold > 65535*time.Second:
		return "spec.holdTime", fmt.Errorf("holdTime %s must be whole seconds 3s-65535s", p.hold)
	case !whole(p.keepalive) || p.keepalive < time.Second || p.keepalive >= p.hold:
		return "spec.keepaliveTime", fmt.Errorf("keepaliveTime %s must be whole seconds, at least 1s and shorter than holdTime %s", p.keepalive, p.hold)
	}
	switch {
	case !whole(p.connect) || p.connect < time.Second || p.connect > 65535*time.Second:
		return "spec.connectTime", fmt.Errorf("connectTime %s must be whole seconds 1s-65535s", p.connect)
	case !whole(p.restart) || p.restart < time.Second || p.restart > 4095*time.Second:
		return "spec.gracefulRestart.restartTime", fmt.Errorf("restartTime %s must be whole seconds 1s-4095s", p.restart)
	}
	return "", nil
}

func (p *peer) resolveFamilies() (string, error) {
	p.families = slices.Clone(p.Families)
	if len(p.families) == 0 {
		p.families = []Family{FamilyOf(p.Address)}
	}
	for _, f := range p.families {
		if f != IPv4 && f != IPv6 {
			return "spec.addressFamilies", fmt.Errorf("address family %d: use IPv4 or IPv6", f)
		}
	}
	slices.Sort(p.families)
	p.families = slices.Compact(p.families)
	return "", nil
}

func (p *peer) resolveBFD(profiles map[string]*BFDProfile) {
	if p.BFDProfile == "" {
		return
	}
	prof, ok := profiles[p.BFDProfile]
	if !ok {
		p.warnings = append(p.warnings, fmt.Sprintf("BFDProfile %q does not exist: the session runs without BFD (failure detection is the hold time) until you create it or remove bfdProfile", p.BFDProfile))
		return
	}
	b := &BFD{ReceiveInterval: prof.ReceiveInterval, TransmitInterval: prof.TransmitInterval, DetectMultiplier: prof.DetectMultiplier}
	if b.ReceiveInterval <= 0 {
		b.ReceiveInterval = DefaultBFDInterval
	}
	if b.TransmitInterval <= 0 {
		b.TransmitInterval = DefaultBFDInterval
	}
	if b.DetectMultiplier < 2 {
		b.DetectMultiplier = DefaultBFDMultiplier
	}
	p.bfd = b
}

// selects reports whether the peer's node selectors pick node.
func selectsNode(sels []*announce.Selector, node *Node) bool { return selectsLabels(sels, node.Labels) }

// selectsLabels reports whether any selector matches labels (none: all).
func selectsLabels(sels []*announce.Selector, labels map[string]string) bool {
	if len(sels) == 0 {
		return true
	}
	for _, s := range sels {
		if s.Matches(labels) {
			return true
		}
	}
	return false
}

// nodeSessions resolves the sessions of one node: the peers selecting it,
// one router ID, one session per peer address. Cost: O(P) per node.
func nodeSessions(node *Node, peers []*peer) NodeResult {
	res := NodeResult{Node: node.Name, Excluded: hasLabel(node.Labels, LabelExcludeFromLB)}
	var idFrom string
	addrFrom := map[netip.Addr]string{}
	for _, p := range peers {
		if !selectsNode(p.NodeSelectors, node) {
			continue
		}
		s := p.session(node)
		switch {
		case addrFrom[p.Address] != "":
			s.Blocked = fmt.Sprintf("BGPPeer %s already peers with %s from this node: one session per router address; remove one of them or tell them apart with nodeSelectors", addrFrom[p.Address], p.Address)
		case p.RouterID.IsValid() && res.RouterID.IsValid() && p.RouterID.Unmap() != res.RouterID:
			s.Blocked = fmt.Sprintf("routerID %s differs from %s (BGPPeer %s) on this node, which runs one BGP instance: set the same routerID on every BGPPeer selecting it, or none", p.RouterID, res.RouterID, idFrom)
		default:
			addrFrom[p.Address] = p.Name
			if p.RouterID.IsValid() && !res.RouterID.IsValid() {
				res.RouterID, idFrom = p.RouterID.Unmap(), p.Name
			}
			if res.ASN == 0 {
				res.ASN = p.MyASN
			}
		}
		res.Sessions = append(res.Sessions, s)
	}
	if !res.RouterID.IsValid() {
		res.RouterID = defaultRouterID(node)
	}
	return res
}

func hasLabel(labels map[string]string, key string) bool {
	_, ok := labels[key]
	return ok
}

// session resolves p for node: next hops for the family the session does
// not run on come from the node's own addresses.
func (p *peer) session(node *Node) Session {
	s := Session{
		Peer: p.Name, Address: p.Address, Port: p.Port, LocalASN: p.MyASN, PeerASN: p.PeerASN, Dynamic: p.Dynamic,
		SourceAddress: p.SourceAddress, HoldTime: p.hold, KeepaliveTime: p.keepalive, ConnectTime: p.connect,
		PasswordSecret: p.PasswordSecret, BFD: p.bfd, GracefulRestart: p.GracefulRestart, RestartTime: p.restart,
		EBGPMultihop: p.EBGPMultihop, Families: p.families, MaxReceived: p.maxRecv, Warnings: slices.Clone(p.warnings),
	}
	if s.Port == 0 {
		s.Port = DefaultPort
	}
	own := FamilyOf(p.Address)
	for _, f := range p.families {
		if f == own {
			continue
		}
		nh := globalAddress(node.Addresses, f)
		if !nh.IsValid() {
			s.Warnings = append(s.Warnings, fmt.Sprintf("node %s has no global %s InternalIP to use as next hop: no %s prefixes are advertised to %s (a v4-mapped next hop is never used); give the node one or drop %s from addressFamilies", node.Name, f, f, p.Name, f))
		} else if f == IPv4 {
			s.NextHop4 = nh
		} else {
			s.NextHop6 = nh
		}
	}
	return s
}

// globalAddress is the first global unicast address of family f.
func globalAddress(addrs []netip.Addr, f Family) netip.Addr {
	for _, a := range addrs {
		a = a.Unmap()
		if FamilyOf(a) == f && a.IsGlobalUnicast() {
			return a
		}
	}
	return netip.Addr{}
}

// defaultRouterID is the node's first IPv4 InternalIP, else a stable
// hash of its name (an IPv6-only node has no IPv4 to use).
func defaultRouterID(node *Node) netip.Addr {
	if a := globalAddress(node.Addresses, IPv4); a.IsValid() {
		return a
	}
	h := fnv.New32a()
	h.Write([]byte(node.Name))
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], h.Sum32()|1) // never 0.0.0.0
	return netip.AddrFrom4(b)
}
