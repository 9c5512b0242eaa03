package importer

import (
	"fmt"
	"slices"
	"strings"
	"time"
)

// bgpPeer maps a MetalLB BGPPeer (v1beta1 or v1beta2).
func (m *metallbImporter) bgpPeer(in mlbBGPIn) error {
	var src struct{ Spec mlbBGPPeerSpec }
	if err := in.o.decodeInto(&src); err != nil {
		return err
	}
	reportUnknown(in.rec, in.o, mlbBGPPeerFields)
	rec, s := in.rec, src.Spec
	if s.PeerAddress == "" {
		what := "no peerAddress"
		if s.Interface != "" {
			what = "BGP unnumbered (interface " + s.Interface + ")"
		}
		rec.notMapped("", "%s: Mooring peers with an address only; not imported — give the router an address and a BGPPeer with peerAddress", what)
		m.skippedPeers = append(m.skippedPeers, in.o.name)
		return nil
	}
	if !validAddr(s.PeerAddress) {
		return in.o.errorf("spec.peerAddress", "%q is not an IP address", s.PeerAddress)
	}
	name := m.claimBGPName(rec, "BGPPeer", in.o.name)
	p := BGPPeer{APIVersion: APIVersion, Kind: "BGPPeer", Metadata: newMeta(name, m.from(rec))}
	target := "BGPPeer " + name + " spec."
	if err := m.peerIdentity(in, s, &p.Spec, target); err != nil {
		return err
	}
	if err := m.peerTimers(in, s, &p.Spec, target); err != nil {
		return err
	}
	m.peerAuth(rec, s, &p.Spec, name, target)
	m.peerSession(rec, s, &p.Spec, target)
	rec.mapped("", "BGPPeer "+name, "")
	m.res.BGP.Peers = append(m.res.BGP.Peers, p)
	return nil
}

// peerIdentity maps the ASNs, addresses, port and router ID.
func (m *metallbImporter) peerIdentity(in mlbBGPIn, s mlbBGPPeerSpec, out *BGPPeerSpec, target string) error {
	rec := in.rec
	if s.MyASN < 1 || s.MyASN > 4294967294 {
		return in.o.errorf("spec.myASN", "%d: want 1-4294967294", s.MyASN)
	}
	out.MyASN, out.PeerAddress = s.MyASN, s.PeerAddress
	rec.mapped("spec.myASN", target+"myASN", "")
	rec.mapped("spec.peerAddress", target+"peerAddress", "")
	switch {
	case s.PeerASN > 0:
		out.PeerASN = ptr(s.PeerASN)
		rec.mapped("spec.peerASN", target+"peerASN", "")
	case s.DynamicASN == "internal" || s.DynamicASN == "external":
		out.DynamicASN = s.DynamicASN
		rec.mapped("spec.dynamicASN", target+"dynamicASN", "")
	case s.DynamicASN != "":
		return in.o.errorf("spec.dynamicASN", "%q: want internal or external", s.DynamicASN)
	default:
		rec.changed("spec.peerASN", target+"peerASN", "neither peerASN nor dynamicASN: MetalLB refuses such a peer; Mooring accepts whatever AS the router names — set peerASN to pin it")
	}
	if s.LocalASN != 0 {
		rec.notMapped("spec.localASN", "Mooring has no local-as: the router sees myASN (%d), not %d; change the router's neighbour AS, or myASN", s.MyASN, s.LocalASN)
	}
	if s.SourceAddress != "" {
		if !validAddr(s.SourceAddress) {
			return in.o.errorf("spec.sourceAddress", "%q is not an IP address", s.SourceAddress)
		}
		out.SourceAddress = s.SourceAddress
		rec.mapped("spec.sourceAddress", target+"sourceAddress", "")
	}
	if s.PeerPort != 0 {
		out.PeerPort = s.PeerPort
		rec.mapped("spec.peerPort", target+"peerPort", "")
	}
	if s.RouterID != "" {
		out.RouterID = s.RouterID
		rec.mapped("spec.routerID", target+"routerID", "")
	}
	if len(s.NodeSelectors) > 0 {
		out.NodeSelectors = selectorsOrNil(s.NodeSelectors)
		rec.mapped("spec.nodeSelectors", target+"nodeSelectors", "a node matching any of them, as in MetalLB")
	}
	return nil
}

// peerTimers maps hold, keepalive and connect times. MetalLB derives a
// missing one of hold/keepalive from the other (×3, ÷3) and its native
// speaker holds 90 s without either.
func (m *metallbImporter) peerTimers(in mlbBGPIn, s mlbBGPPeerSpec, out *BGPPeerSpec, target string) error {
	rec := in.rec
	hold, ka := s.HoldTime, s.KeepaliveTime
	switch {
	case hold == nil && ka == nil:
		out.HoldTime = seconds(metallbHoldTime)
		rec.changed("spec.holdTime", target+"holdTime", "absent: MetalLB's native speaker's %s written out (its FRR modes use FRR's 180s); Mooring's default is 9s — remove holdTime to use it, or add a BFDProfile (docs/bgp.md)", seconds(metallbHoldTime))
	case hold != nil && hold.Duration == 0:
		rec.changed("spec.holdTime", target+"holdTime", "0 (no keepalives, a dead router never noticed) is not offered by Mooring: left unset, Mooring's default 9s applies")
	case hold != nil:
		if hold.Duration < 3*time.Second || hold.Duration%time.Second != 0 {
			return in.o.errorf("spec.holdTime", "%s: want whole seconds, 3s or more", hold.Duration)
		}
		out.HoldTime = seconds(hold.Duration)
		rec.mapped("spec.holdTime", target+"holdTime", "")
	default: // keepalive only: MetalLB holds 3× it
		out.HoldTime = seconds(3 * ka.Duration)
		rec.changed("spec.keepaliveTime", target+"holdTime", "MetalLB's hold time without holdTime is 3× the keepalive: written out as %s", seconds(3*ka.Duration))
	}
	if ka != nil {
		if ka.Duration < time.Second || ka.Duration%time.Second != 0 {
			return in.o.errorf("spec.keepaliveTime", "%s: want whole seconds, 1s or more", ka.Duration)
		}
		out.KeepaliveTime = seconds(ka.Duration)
		rec.mapped("spec.keepaliveTime", target+"keepaliveTime", "")
	}
	if c := s.ConnectTime; c != nil {
		if c.Duration < time.Second || c.Duration%time.Second != 0 {
			return in.o.errorf("spec.connectTime", "%s: want whole seconds, 1s or more", c.Duration)
		}
		out.ConnectTime = seconds(c.Duration)
		rec.mapped("spec.connectTime", target+"connectTime", "")
	}
	return nil
}

// peerAuth maps the TCP-MD5 password: Mooring reads it from a Secret in its
// own namespace only, so a literal password or a Secret of MetalLB's
// namespace has to be copied there; the importer writes no Secret.
func (m *metallbImporter) peerAuth(rec recorder, s mlbBGPPeerSpec, out *BGPPeerSpec, name, target string) {
	if s.Password != "" {
		secret := name + "-bgp-password"
		out.PasswordSecret = &SecretRef{Name: secret}
		rec.changed("spec.password", target+"passwordSecret", "Mooring reads passwords from Secrets only: create Secret %s in Mooring's namespace with key password (kubectl -n mooring-system create secret generic %s --from-literal=password=...); until then the session stays closed (never unauthenticated)", secret, secret)
	}
	if ps := s.PasswordSecret; ps != nil && ps.Name != "" {
		out.PasswordSecret = &SecretRef{Name: ps.Name}
		ns := ps.Namespace
		if ns == "" {
			ns = "metallb-system"
		}
		rec.changed("spec.passwordSecret", target+"passwordSecret", "Mooring reads Secret %s from its own namespace (key password, as MetalLB's basic-auth Secret): copy %s/%s there; until then the session stays closed", ps.Name, ns, ps.Name)
	}
}

// peerSession maps BFD, graceful restart, multihop and address families;
// VRF and the deprecated disableMP are reported.
func (m *metallbImporter) peerSession(rec recorder, s mlbBGPPeerSpec, out *BGPPeerSpec, target string) {
	if s.BFDProfile != "" {
		out.BFDProfile = s.BFDProfile
		if n := m.importedName("BFDProfile", s.BFDProfile); n != "" {
			out.BFDProfile = n
			rec.mapped("spec.bfdProfile", target+"bfdProfile", "BFDProfile %s", n)
		} else {
			rec.changed("spec.bfdProfile", target+"bfdProfile", "names BFDProfile %q, which is not among the imported objects: import it too, or the peer reports it missing and runs without BFD", s.BFDProfile)
		}
	}
	if s.EnableGracefulRestart {
		out.GracefulRestart = &GracefulRestart{Enabled: ptr(true)}
		rec.mapped("spec.enableGracefulRestart", target+"gracefulRestart.enabled", "restart time 120s, as FRR's default that MetalLB uses")
	} else {
		out.GracefulRestart = &GracefulRestart{Enabled: ptr(false)}
		rec.changed("spec.enableGracefulRestart", target+"gracefulRestart.enabled", "MetalLB's default (and its native speaker) has no graceful restart: written as enabled: false to keep that; Mooring's default is on — remove gracefulRestart so that an agent restart keeps the routes (docs/bgp.md)")
	}
	if s.EBGPMultiHop {
		out.EBGPMultihop = ptr(int32(255))
		rec.mapped("spec.ebgpMultiHop", target+"ebgpMultihop", "true is TTL 255")
	}
	if s.DualStackAddressFamily {
		out.AddressFamilies = []string{"IPv4", "IPv6"}
		rec.mapped("spec.dualStackAddressFamily", target+"addressFamilies", "both families over this one session")
	}
	if s.DisableMP {
		rec.mapped("spec.disableMP", target+"addressFamilies", "the default: a session carries its address's family only")
	}
	if s.VRF != "" {
		rec.notMapped("spec.vrf", "Mooring opens sessions in the node's default VRF only: not imported; a peer reachable only through VRF %s will not establish", s.VRF)
	}
}

// bgpAdvertisement maps a MetalLB BGPAdvertisement.
func (m *metallbImporter) bgpAdvertisement(in mlbBGPIn) error {
	var src struct{ Spec mlbBGPAdvSpec }
	if err := in.o.decodeInto(&src); err != nil {
		return err
	}
	reportUnknown(in.rec, in.o, mlbBGPAdvFields)
	rec, s := in.rec, src.Spec
	name := m.claimBGPName(rec, "BGPAdvertisement", in.o.name)
	a := BGPAdvertisement{APIVersion: APIVersion, Kind: "BGPAdvertisement", Metadata: newMeta(name, m.from(rec))}
	target := "BGPAdvertisement " + name + " spec."
	rec.mapped("", "BGPAdvertisement "+name, "selects the same pools, Services, nodes and peers (what MetalLB leaves empty means every one, in both)")
	if err := m.advAttributes(in, s, &a.Spec, target); err != nil {
		return err
	}
	m.advPoolsBGP(rec, s, &a.Spec, target)
	m.advPeers(rec, s, &a.Spec, target)
	if len(s.NodeSelectors) > 0 {
		a.Spec.NodeSelectors = selectorsOrNil(s.NodeSelectors)
		rec.mapped("spec.nodeSelectors", target+"nodeSelectors", "a node matching any of them advertises, as in MetalLB")
	}
	if len(s.ServiceSelectors) > 0 {
		a.Spec.ServiceSelectors = selectorsOrNil(s.ServiceSelectors)
		rec.mapped("spec.serviceSelectors", target+"serviceSelectors", "a Service matching any of them, as in MetalLB")
	}
	m.res.BGP.Advertisements = append(m.res.BGP.Advertisements, a)
	return nil
}

// advAttributes maps aggregation lengths, LOCAL_PREF and communities.
func (m *metallbImporter) advAttributes(in mlbBGPIn, s mlbBGPAdvSpec, out *BGPAdvertisementSpec, target string) error {
	rec := in.rec
	if l := s.AggregationLength; l != nil {
		if *l < 0 || *l > 32 {
			return in.o.errorf("spec.aggregationLength", "%d: want 0-32", *l)
		}
		out.AggregationLength = ptr(*l)
		rec.mapped("spec.aggregationLength", target+"aggregationLength", "")
	}
	if l := s.AggregationLengthV6; l != nil {
		if *l < 0 || *l > 128 {
			return in.o.errorf("spec.aggregationLengthV6", "%d: want 0-128", *l)
		}
		out.AggregationLengthV6 = ptr(*l)
		rec.mapped("spec.aggregationLengthV6", target+"aggregationLengthV6", "")
	}
	if lp := s.LocalPref; lp != nil {
		if *lp < 0 || *lp > 4294967295 {
			return in.o.errorf("spec.localPref", "%d: want 0-4294967295", *lp)
		}
		out.LocalPref = ptr(*lp)
		rec.mapped("spec.localPref", target+"localPref", "sent to iBGP peers only, as in MetalLB")
	}
	for i, c := range s.Communities {
		field := fmt.Sprintf("spec.communities[%d]", i)
		if _, err := parseMLBCommunity(c); err != nil && !m.aliases[c] {
			if !communityName.MatchString(c) {
				return in.o.errorf(field, "%q is no community value and no valid alias name", c)
			}
			rec.changed(field, target+"communities", "alias %q is defined by no imported Community: import it too, or the advertisement reports it unknown and advertises nothing", c)
		} else {
			rec.mapped(field, target+"communities", "")
		}
		out.Communities = append(out.Communities, c)
	}
	return nil
}

// advPoolsBGP maps the pools an advertisement selects. Imported pools carry
// no labels, so a pool selector is resolved to the pools it matches now
// (and kept, matching nothing, so that a selector that matched no pool
// does not become "every pool").
func (m *metallbImporter) advPoolsBGP(rec recorder, s mlbBGPAdvSpec, out *BGPAdvertisementSpec, target string) {
	if len(s.IPAddressPools) == 0 && len(s.IPAddressPoolSelectors) == 0 {
		return // every pool, in both
	}
	for i, n := range s.IPAddressPools {
		field := fmt.Sprintf("spec.ipAddressPools[%d]", i)
		p := m.poolNamed(n)
		if p == nil {
			out.Pools = append(out.Pools, n)
			rec.changed(field, target+"pools", "names pool %q, which is not among the imported objects", n)
			continue
		}
		out.Pools = append(out.Pools, p.importedAs)
		rec.mapped(field, target+"pools", "LoadBalancerIPPool %s", p.importedAs)
	}
	if len(s.IPAddressPoolSelectors) == 0 {
		return
	}
	var matched []string
	for _, p := range m.pools {
		if poolSelected(s.IPAddressPoolSelectors, p.labels) && !slices.Contains(out.Pools, p.importedAs) {
			out.Pools = append(out.Pools, p.importedAs)
			matched = append(matched, p.importedAs)
		}
	}
	out.PoolSelectors = selectorsOrNil(s.IPAddressPoolSelectors)
	now := "none"
	if len(matched) > 0 {
		now = strings.Join(matched, ", ")
	}
	rec.changed("spec.ipAddressPoolSelectors", target+"pools", "resolved to the pools they match now (%s), since imported pools carry no labels; the selectors are kept too (matching no imported pool), so that they do not widen to every pool", now)
}

// poolNamed returns the imported pool of a MetalLB pool name.
func (m *metallbImporter) poolNamed(name string) *mlbPoolIn {
	for _, p := range m.pools {
		if p.name == name {
			return p
		}
	}
	return nil
}

// advPeers maps the peers an advertisement goes to.
func (m *metallbImporter) advPeers(rec recorder, s mlbBGPAdvSpec, out *BGPAdvertisementSpec, target string) {
	if len(s.Peers) == 0 && len(m.skippedPeers) > 0 {
		rec.changed("spec.peers", target+"peers", "every peer, in both; but MetalLB's BGPPeers %v were not imported, so Mooring advertises to the others only", m.skippedPeers)
	}
	for i, n := range s.Peers {
		field := fmt.Sprintf("spec.peers[%d]", i)
		if in := m.importedName("BGPPeer", n); in != "" {
			out.Peers = append(out.Peers, in)
			rec.mapped(field, target+"peers", "BGPPeer %s", in)
			continue
		}
		out.Peers = append(out.Peers, n)
		rec.changed(field, target+"peers", "names BGPPeer %q, which is not among the imported objects: the advertisement reaches no peer of that name", n)
	}
}
