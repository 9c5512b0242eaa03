package announce

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
)

// Ranking names how a policy orders the candidate nodes of an address.
type Ranking string

const (
	// RankingMooring is Mooring's rendezvous hash (Score): the default.
	RankingMooring Ranking = ""
	// RankingMetalLB orders candidates exactly as MetalLB's layer-2 speaker
	// does (go.universe.tf/metallb speaker/layer2_controller.go,
	// sortL2Candidates, v0.13–v0.16): the smallest sha256(node + "#" + ip)
	// first. A migration off MetalLB with this ranking keeps every address on
	// the node MetalLB chose, so no connection in flight is reset.
	RankingMetalLB Ranking = "MetalLB"
)

// metallbVersion is appended to RankingVersion by builds that compute
// RankingMetalLB: an agent without it picks other owners for a
// MetalLB-ranked policy (it does not know the field).
const metallbVersion = "+metallb-l2-sha256-v1"

// RankingAgrees reports whether a member publishing the ranking version
// theirs picks the same owners as this build under pols: the same hash
// version, and MetalLB's ranking too when any policy uses it. Every agent of
// one build publishes the same version whatever the policies, so applying
// a policy never reads as a mixed cluster for a moment; a member of an
// older build disagrees only while a policy needs what it lacks.
func RankingAgrees(theirs string, pols []Policy) bool {
	base, ext, _ := strings.Cut(theirs, "+")
	if base != hashVersion {
		return false
	}
	for _, p := range pols {
		if p.Ranking == RankingMetalLB {
			return slices.Contains(strings.Split(ext, "+"), strings.TrimPrefix(metallbVersion, "+"))
		}
	}
	return true
}

// MetalLBScore is node's weight for addr under RankingMetalLB: the first 64
// bits of sha256(node + "#" + addr), complemented so that, as with Score,
// the highest weight wins (MetalLB takes the smallest digest). The string
// is what MetalLB hashes: Go's text form of the address (net.IP.String and
// netip.Addr.String agree for IPv4 and canonical IPv6). MetalLB compares
// whole digests; a tie in the first 64 bits has probability 2⁻⁶⁴ per pair,
// and ties go to the smaller name. Cost: one sha256 of len(node)+40 bytes.
func MetalLBScore(node string, addr netip.Addr) uint64 {
	d := sha256.Sum256([]byte(node + "#" + addr.Unmap().WithZone("").String()))
	return ^binary.BigEndian.Uint64(d[:8])
}

// score is node i's weight for a under ranking r; key is what MetalLB
// hashes for a (metallbKey).
func (u *universe) score(r Ranking, i int, a, key netip.Addr) uint64 {
	if r == RankingMetalLB {
		return MetalLBScore(u.names[i], key)
	}
	return scoreFrom(u.prefix[i], a)
}

// metallbKey is the address MetalLB hashes when it announces a for s: the
// Service's FIRST status.loadBalancer.ingress address, in status order, for
// every address of the Service (a dual-stack Service is announced from one
// node). An address s does not hold as ingress (an externalIP, which
// MetalLB never announces) is its own key.
func metallbKey(s *Service, a netip.Addr) netip.Addr {
	if len(s.IngressIPs) == 0 || !s.IngressIPs[0].IsValid() {
		return a
	}
	for _, x := range s.IngressIPs {
		if x.Unmap().WithZone("") == a {
			return s.IngressIPs[0].Unmap().WithZone("")
		}
	}
	return a
}

// rankingOf is the ranking of an address announced under pols: MetalLB's
// when any of them asks for it (policies imported from MetalLB do; a mix
// only happens while one Service is announced by two policies at once).
func rankingOf(pols []*policy) Ranking {
	for _, p := range pols {
		if p.Ranking == RankingMetalLB {
			return RankingMetalLB
		}
	}
	return RankingMooring
}
