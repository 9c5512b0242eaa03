package bgpagent

import (
	"net/netip"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/ipalloc"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// Objects are the API objects the BGP decision reads besides the Services
// (which the agent's loop converts once for L2 and BGP alike).
type Objects struct {
	Peers          []mooringv1.BGPPeer
	Advertisements []mooringv1.BGPAdvertisement
	Communities    []mooringv1.BGPCommunity
	BFDProfiles    []mooringv1.BFDProfile
	Pools          []mooringv1.LoadBalancerIPPool
	Namespaces     []corev1.Namespace
	Nodes          []corev1.Node
}

// Input converts objs into the core's input; Services and Local are the
// caller's. It is the only place that knows how the API spells BGP.
func Input(objs Objects) bgp.Input {
	in := bgp.Input{Namespaces: map[string]map[string]string{}}
	for i := range objs.Peers {
		in.Peers = append(in.Peers, Peer(&objs.Peers[i]))
	}
	for i := range objs.Advertisements {
		in.Advertisements = append(in.Advertisements, Advertisement(&objs.Advertisements[i]))
	}
	for i := range objs.Communities {
		c := &objs.Communities[i]
		for _, a := range c.Spec.Communities {
			in.Communities = append(in.Communities, bgp.CommunityAlias{Object: c.Name, Name: a.Name, Value: a.Value})
		}
	}
	for i := range objs.BFDProfiles {
		in.BFDProfiles = append(in.BFDProfiles, BFDProfile(&objs.BFDProfiles[i]))
	}
	for i := range objs.Pools {
		in.Pools = append(in.Pools, Pool(&objs.Pools[i]))
	}
	for i := range objs.Namespaces {
		in.Namespaces[objs.Namespaces[i].Name] = objs.Namespaces[i].Labels
	}
	for i := range objs.Nodes {
		n := &objs.Nodes[i]
		in.Nodes = append(in.Nodes, bgp.Node{Name: n.Name, Labels: n.Labels, Addresses: InternalIPs(n)})
	}
	return in
}

// Peer converts a BGPPeer. Values admission refuses still arrive as they
// are: the core reports them.
func Peer(p *mooringv1.BGPPeer) bgp.Peer {
	s := &p.Spec
	out := bgp.Peer{
		Name: p.Name, MyASN: uint32(s.MyASN), Dynamic: bgp.DynamicASN(s.DynamicASN),
		Address: addr(s.PeerAddress), Port: uint16(s.PeerPort), SourceAddress: addr(s.SourceAddress), RouterID: addr(s.RouterID),
		HoldTime: dur(s.HoldTime), KeepaliveTime: dur(s.KeepaliveTime), ConnectTime: dur(s.ConnectTime),
		NodeSelectors: selectors(s.NodeSelectors), BFDProfile: s.BFDProfile, GracefulRestart: true,
	}
	if s.PeerASN != nil {
		out.PeerASN = uint32(*s.PeerASN)
	}
	if s.PasswordSecret != nil {
		out.PasswordSecret = s.PasswordSecret.Name
	}
	if gr := s.GracefulRestart; gr != nil {
		out.GracefulRestart = gr.Enabled == nil || *gr.Enabled
		out.RestartTime = dur(gr.RestartTime)
	}
	if s.EBGPMultihop != nil && *s.EBGPMultihop > 0 && *s.EBGPMultihop <= 255 {
		out.EBGPMultihop = uint8(*s.EBGPMultihop)
	}
	if m := s.MaxReceivedPrefixes; m != nil {
		// Admission keeps it within 0..bgp.MaxMaxReceived; anything else
		// becomes a value the core refuses, naming the field.
		v := uint32(bgp.MaxMaxReceived + 1)
		if *m >= 0 && *m <= bgp.MaxMaxReceived {
			v = uint32(*m)
		}
		out.MaxReceived = &v
	}
	for _, f := range s.AddressFamilies {
		if f == mooringv1.BGPFamilyIPv6 {
			out.Families = append(out.Families, bgp.IPv6)
		} else {
			out.Families = append(out.Families, bgp.IPv4)
		}
	}
	return out
}

// Advertisement converts a BGPAdvertisement.
func Advertisement(a *mooringv1.BGPAdvertisement) bgp.Advertisement {
	s := &a.Spec
	out := bgp.Advertisement{
		Name: a.Name, Pools: s.Pools, PoolSelectors: selectors(s.PoolSelectors),
		ServiceSelectors: selectors(s.ServiceSelectors), NamespaceSelectors: selectors(s.NamespaceSelectors),
		NodeSelectors: selectors(s.NodeSelectors), Peers: s.Peers, Communities: s.Communities,
		// The CRD defaults it to true; an object written without the
		// default means the same.
		LoadBalancerIPs: s.LoadBalancerIPs == nil || *s.LoadBalancerIPs,
		ExternalIPs:     s.ExternalIPs,
	}
	if s.AggregationLength != nil {
		n := int(*s.AggregationLength)
		out.AggregationLength = &n
	}
	if s.AggregationLengthV6 != nil {
		n := int(*s.AggregationLengthV6)
		out.AggregationLengthV6 = &n
	}
	if s.LocalPref != nil && *s.LocalPref >= 0 && *s.LocalPref <= 1<<32-1 {
		lp := uint32(*s.LocalPref)
		out.LocalPref = &lp
	}
	return out
}

// BFDProfile converts a BFDProfile (milliseconds in the API).
func BFDProfile(p *mooringv1.BFDProfile) bgp.BFDProfile {
	ms := func(v *int32) time.Duration {
		if v == nil || *v <= 0 {
			return 0
		}
		return time.Duration(*v) * time.Millisecond
	}
	out := bgp.BFDProfile{Name: p.Name, ReceiveInterval: ms(p.Spec.ReceiveInterval), TransmitInterval: ms(p.Spec.TransmitInterval)}
	if m := p.Spec.DetectMultiplier; m != nil && *m > 0 && *m <= 255 {
		out.DetectMultiplier = uint8(*m)
	}
	return out
}

// Pool converts a LoadBalancerIPPool's name, labels and valid blocks
// (the controller reports the others).
func Pool(p *mooringv1.LoadBalancerIPPool) bgp.Pool {
	out := bgp.Pool{Name: p.Name, Labels: p.Labels}
	for _, b := range p.Spec.Blocks {
		var blk lbipam.Block
		var err error
		if b.CIDR != "" {
			blk, err = lbipam.ParseCIDRBlock(b.CIDR)
		} else {
			blk, err = lbipam.ParseRangeBlock(b.Start, b.Stop)
		}
		if err == nil {
			out.Ranges = append(out.Ranges, ipalloc.Range{First: blk.First, Last: blk.Last})
		}
	}
	return out
}

// InternalIPs are a Node's InternalIP addresses.
func InternalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

func addr(s string) netip.Addr {
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Addr{}
	}
	return a.Unmap()
}

func dur(d *metav1.Duration) *time.Duration {
	if d == nil {
		return nil
	}
	v := d.Duration
	return &v
}

func selectors(in []metav1.LabelSelector) []*announce.Selector {
	var out []*announce.Selector
	for i := range in {
		out = append(out, selector(&in[i]))
	}
	return out
}

func selector(s *metav1.LabelSelector) *announce.Selector {
	out := &announce.Selector{MatchLabels: s.MatchLabels}
	for _, r := range s.MatchExpressions {
		out.MatchExpressions = append(out.MatchExpressions, announce.Requirement{Key: r.Key, Operator: announce.Operator(r.Operator), Values: r.Values})
	}
	return out
}
