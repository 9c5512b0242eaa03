package bgpspeaker

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	mbgp "github.com/mooringlb/mooring/internal/bgp"
)

// Session tuning the API does not expose (docs/bgp.md says why).
const (
	// idleHoldAfterReset is how long GoBGP waits after a session reset
	// before it reconnects (its default is 30 s): a rebooted router gets
	// its routes back within seconds, and a router that keeps resetting
	// the session still costs one attempt per few seconds.
	idleHoldAfterReset = 2
	// deferralTime bounds how long a restarting node waits for every
	// router's End-of-RIB before it sends its own routes (GoBGP's default
	// is 360 s). The node learns nothing it uses, so there is nothing to
	// wait for: 1 s, the smallest GoBGP accepts, keeps End-of-RIB within a
	// second or two of the session even when another router is down.
	deferralTime = 1
	// vrfAdmin is the administrator part of the internal per-peer route
	// distinguishers and targets (never sent on the wire).
	vrfAdmin = 65535
)

func vrfFor(name string, id uint32) *api.Vrf {
	rd := &api.RouteDistinguisher{Rd: &api.RouteDistinguisher_TwoOctetAsn{TwoOctetAsn: &api.RouteDistinguisherTwoOctetASN{Admin: vrfAdmin, Assigned: id}}}
	rt := &api.RouteTarget{Rt: &api.RouteTarget_TwoOctetAsSpecific{TwoOctetAsSpecific: &api.TwoOctetAsSpecificExtended{
		IsTransitive: true, SubType: uint32(bgp.EC_SUBTYPE_ROUTE_TARGET), Asn: vrfAdmin, LocalAdmin: id,
	}}}
	return &api.Vrf{Name: name, Id: id, Rd: rd, ImportRt: []*api.RouteTarget{rt}, ExportRt: []*api.RouteTarget{rt}}
}

func seconds(d time.Duration) uint64 { return uint64(d / time.Second) }

// apiPeer turns a session into GoBGP's peer configuration.
func apiPeer(p PeerConfig, vrf string, restarting bool) *api.Peer {
	peer := &api.Peer{
		Conf: &api.PeerConf{
			NeighborAddress: p.Address.String(), PeerAsn: p.PeerASN, LocalAsn: p.LocalASN,
			AuthPassword: p.Password, Description: p.Peer, Vrf: vrf,
		},
		Timers: &api.Timers{Config: &api.TimersConfig{
			ConnectRetry: seconds(p.ConnectTime), HoldTime: seconds(p.HoldTime),
			KeepaliveInterval: seconds(p.KeepaliveTime), IdleHoldTimeAfterReset: idleHoldAfterReset,
		}},
		Transport: &api.Transport{RemotePort: uint32(p.Port)},
	}
	if p.SourceAddress.IsValid() {
		peer.Transport.LocalAddress = p.SourceAddress.String()
	}
	if p.EBGPMultihop > 1 {
		peer.EbgpMultihop = &api.EbgpMultihop{Enabled: true, MultihopTtl: uint32(p.EBGPMultihop)}
	}
	if p.GracefulRestart {
		peer.GracefulRestart = &api.GracefulRestart{
			Enabled: true, RestartTime: uint32(seconds(p.RestartTime)), DeferralTime: deferralTime, LocalRestarting: restarting,
		}
	}
	for _, f := range p.Families {
		// No GoBGP prefix limit (PrefixLimits): it counts the whole
		// Adj-RIB-In after every UPDATE; Sessions enforces MaxReceived.
		peer.AfiSafis = append(peer.AfiSafis, &api.AfiSafi{
			Config:            &api.AfiSafiConfig{Family: apiFamily(f), Enabled: true},
			MpGracefulRestart: &api.MpGracefulRestart{Config: &api.MpGracefulRestartConfig{Enabled: p.GracefulRestart}},
		})
	}
	// No GoBGP BFD (peer.Bfd): the backend runs its own (addBFD).
	return peer
}

func apiFamily(f mbgp.Family) *api.Family {
	if f == mbgp.IPv6 {
		return &api.Family{Afi: api.Family_AFI_IP6, Safi: api.Family_SAFI_UNICAST}
	}
	return &api.Family{Afi: api.Family_AFI_IP, Safi: api.Family_SAFI_UNICAST}
}

// attrCache builds GoBGP path attributes once per distinct attribute set
// and next hop, so 10,000 routes with the same communities share them.
type attrCache map[attrKey][]bgp.PathAttributeInterface

type attrKey struct {
	attrs   string
	nextHop netip.Addr
	v6      bool
}

// maxAttrSets bounds the cache; it is dropped when full (attribute sets
// are few: one per advertisement and per merge of advertisements).
const maxAttrSets = 1024

// paths converts routes to GoBGP paths for one VRF.
func (c attrCache) paths(routes []Path, withdraw bool) ([]*apiutil.Path, error) {
	out := make([]*apiutil.Path, 0, len(routes))
	for _, r := range routes {
		nlri, err := bgp.NewIPAddrPrefix(r.Prefix)
		if err != nil {
			return nil, fmt.Errorf("route %s: %w", r.Prefix, err)
		}
		fam := bgp.RF_IPv4_UC
		v6 := r.Prefix.Addr().Is6()
		if v6 {
			fam = bgp.RF_IPv6_UC
		}
		p := &apiutil.Path{Family: fam, Nlri: nlri, Withdrawal: withdraw}
		if !withdraw {
			if p.Attrs, err = c.attrs(r, v6); err != nil {
				return nil, fmt.Errorf("route %s: %w", r.Prefix, err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

func (c attrCache) attrs(r Path, v6 bool) ([]bgp.PathAttributeInterface, error) {
	k := attrKey{nextHop: r.NextHop, v6: v6}
	if r.Attrs != nil {
		k.attrs = r.Attrs.Key()
	}
	if a, ok := c[k]; ok {
		return a, nil
	}
	if len(c) >= maxAttrSets {
		clear(c)
	}
	nh := r.NextHop
	if !nh.IsValid() {
		// Unspecified: GoBGP puts the session's own address in.
		nh = netip.IPv4Unspecified()
		if v6 {
			nh = netip.IPv6Unspecified()
		}
	}
	nhAttr, err := bgp.NewPathAttributeNextHop(nh)
	if err != nil {
		return nil, err
	}
	a := []bgp.PathAttributeInterface{bgp.NewPathAttributeOrigin(0), nhAttr}
	if r.Attrs != nil {
		if len(r.Attrs.Communities) > 0 {
			a = append(a, bgp.NewPathAttributeCommunities(r.Attrs.Communities))
		}
		if len(r.Attrs.Large) > 0 {
			lcs := make([]*bgp.LargeCommunity, 0, len(r.Attrs.Large))
			for _, l := range r.Attrs.Large {
				lcs = append(lcs, bgp.NewLargeCommunity(l.Global, l.Local1, l.Local2))
			}
			a = append(a, bgp.NewPathAttributeLargeCommunities(lcs))
		}
		if r.Attrs.HasLocalPref {
			a = append(a, bgp.NewPathAttributeLocalPref(r.Attrs.LocalPref))
		}
	}
	c[k] = a
	return a, nil
}
