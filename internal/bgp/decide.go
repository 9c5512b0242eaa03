package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/mooringlb/mooring/internal/announce"
)

// Decide computes every node's sessions and routes (only Input.Local's
// when set). It is a pure function of its input. Cost: O(S·A·D + N·(S·A·D·P))
// for S Services, A addresses each, D advertisements, N nodes and P
// sessions per node; with Local set N is 1.
func Decide(in Input) Result {
	al, problems := buildAliases(in.Communities)
	peers, pp := validatePeers(in.Peers, in.BFDProfiles)
	advs, ap := validateAdvertisements(in.Advertisements, al, in.Pools)
	problems = append(append(problems, pp...), ap...)
	problems = append(problems, unknownReferences(in, advs)...)
	cands := candidates(in, advs)

	var res Result
	nodes := slices.Clone(in.Nodes)
	slices.SortFunc(nodes, func(a, b Node) int { return cmp.Compare(a.Name, b.Name) })
	for i := range nodes {
		n := &nodes[i]
		if in.Local != "" && n.Name != in.Local {
			continue
		}
		nr := nodeSessions(n, peers)
		if !nr.Excluded {
			routeSessions(&nr, n.Labels, cands)
		}
		res.Nodes = append(res.Nodes, nr)
	}
	slices.SortFunc(problems, compareProblems)
	res.Problems = slices.CompactFunc(problems, func(a, b Problem) bool { return compareProblems(a, b) == 0 })
	return res
}

func compareProblems(a, b Problem) int {
	return cmp.Or(cmp.Compare(a.Kind, b.Kind), cmp.Compare(a.Object, b.Object), cmp.Compare(a.Field, b.Field), cmp.Compare(a.Message, b.Message))
}

// candidate is one address an advertisement selects, before the node and
// peer checks.
type candidate struct {
	svc    *announce.Service
	adv    *adv
	prefix netip.Prefix
}

// candidates lists (Service, advertisement, prefix) triples; they do not
// depend on the node. Cost: O(S·A·D·R).
func candidates(in Input, advs []*adv) []candidate {
	ix := newPoolIndex(in.Pools)
	// Sized for one advertisement per address: exact for the common case
	// (the array is the largest of a pass: 48 bytes a candidate), grown
	// when more advertisements select one.
	n := 0
	for _, svc := range in.Services {
		n += len(svc.IngressIPs) + len(svc.ExternalIPs)
	}
	out := make([]candidate, 0, n)
	for i := range in.Services {
		svc := in.Services[i]
		for _, a := range advs {
			if !a.selectsService(svc, in.Namespaces) {
				continue
			}
			add := func(addr netip.Addr) {
				addr = addr.Unmap()
				if !usable(addr) || !ix.selects(a, addr) {
					return
				}
				p := a.prefixFor(addr)
				if !ix.inAnyPool(addr) {
					p = netip.PrefixFrom(addr, addr.BitLen())
				}
				out = append(out, candidate{svc: svc, adv: a, prefix: p})
			}
			if a.LoadBalancerIPs {
				for _, addr := range svc.IngressIPs {
					add(addr)
				}
			}
			if a.ExternalIPs {
				for _, addr := range svc.ExternalIPs {
					add(addr)
				}
			}
		}
	}
	return out
}

// usable drops addresses no router should carry for a Service.
func usable(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsLoopback() && !a.IsMulticast() && !a.IsLinkLocalUnicast()
}

// eligible reports whether node may advertise c: the advertisement's node
// selectors, and for externalTrafficPolicy: Local a ready local endpoint.
func eligible(c *candidate, node string, labels map[string]string) bool {
	if len(c.adv.NodeSelectors) > 0 && !selectsLabels(c.adv.NodeSelectors, labels) {
		return false
	}
	return !c.svc.LocalTraffic || slices.Contains(c.svc.ReadyNodes, node)
}

// routeSessions fills each open session's routes from the candidates the
// node is eligible for, merging the attributes of several advertisements
// of one prefix (communities united, the highest LOCAL_PREF). Cost:
// O(C·P + R log R) for C candidates, P sessions and R routes; no map per
// route (at 10,000 Services a map per session was most of the time).
func routeSessions(nr *NodeResult, labels map[string]string, cands []candidate) {
	perSession := make([][]Route, len(nr.Sessions))
	m := merger{}
	for i := range cands {
		c := &cands[i]
		if !eligible(c, nr.Node, labels) {
			continue
		}
		f := FamilyOf(c.prefix.Addr())
		for si := range nr.Sessions {
			s := &nr.Sessions[si]
			if s.Blocked != "" || (c.adv.peers != nil && !c.adv.peers[s.Peer]) || !s.carries(f) {
				continue
			}
			if perSession[si] == nil {
				perSession[si] = make([]Route, 0, len(cands)-i)
			}
			perSession[si] = append(perSession[si], Route{Prefix: c.prefix, Attrs: c.adv.attrs})
		}
	}
	for si, routes := range perSession {
		slices.SortFunc(routes, func(a, b Route) int { return comparePrefix(a.Prefix, b.Prefix) })
		out := routes[:0]
		for _, r := range routes {
			if n := len(out); n > 0 && out[n-1].Prefix == r.Prefix {
				out[n-1].Attrs = m.merge(out[n-1].Attrs, r.Attrs)
				continue
			}
			out = append(out, r)
		}
		nr.Sessions[si].Routes = slices.Clip(out)
	}
}

// carries reports whether the session sends prefixes of family f: it
// negotiates f, and for the family it does not run on it has a next hop.
func (s *Session) carries(f Family) bool {
	if !slices.Contains(s.Families, f) {
		return false
	}
	if f == FamilyOf(s.Address) {
		return true
	}
	if f == IPv4 {
		return s.NextHop4.IsValid()
	}
	return s.NextHop6.IsValid()
}

func comparePrefix(a, b netip.Prefix) int {
	return cmp.Or(a.Addr().Compare(b.Addr()), cmp.Compare(a.Bits(), b.Bits()))
}

// merger merges attribute sets, each pair once, interning the results
// so routes with equal attributes share one *Attrs.
type merger struct {
	pairs  map[[2]*Attrs]*Attrs
	intern map[string]*Attrs
}

func (m *merger) merge(old, add *Attrs) *Attrs {
	if old == nil || old == add {
		return add
	}
	if m.pairs == nil {
		m.pairs, m.intern = map[[2]*Attrs]*Attrs{}, map[string]*Attrs{}
	}
	if got, ok := m.pairs[[2]*Attrs{old, add}]; ok {
		return got
	}
	merged := mergeAttrs(old, add, m.intern)
	m.pairs[[2]*Attrs{old, add}] = merged
	return merged
}

// mergeAttrs unites two attribute sets, interning the result.
func mergeAttrs(old, add *Attrs, intern map[string]*Attrs) *Attrs {
	m := &Attrs{
		Communities: sortedUnique(append(slices.Clone(old.Communities), add.Communities...)),
		Large:       sortedUniqueLarge(append(slices.Clone(old.Large), add.Large...)),
	}
	for _, a := range []*Attrs{old, add} {
		if a.HasLocalPref && (!m.HasLocalPref || a.LocalPref > m.LocalPref) {
			m.LocalPref, m.HasLocalPref = a.LocalPref, true
		}
	}
	m.key = m.computeKey()
	if got, ok := intern[m.key]; ok {
		return got
	}
	intern[m.key] = m
	return m
}

// Key is a text equal for equal attributes, e.g. to cache what a backend
// builds from them. Cost: O(1) for the sets Decide returns.
func (a *Attrs) Key() string {
	if a.key != "" {
		return a.key
	}
	return a.computeKey()
}

func (a *Attrs) computeKey() string {
	var b strings.Builder
	fmt.Fprint(&b, a.Communities, a.Large, a.HasLocalPref, a.LocalPref)
	return b.String()
}

// unknownReferences warns about names that point nowhere: the object may
// appear later, so nothing is invalid.
func unknownReferences(in Input, advs []*adv) []Problem {
	peers := map[string]bool{}
	for _, p := range in.Peers {
		peers[p.Name] = true
	}
	pools := map[string]bool{}
	for _, p := range in.Pools {
		pools[p.Name] = true
	}
	var out []Problem
	for _, a := range advs {
		for i, p := range a.Peers {
			if !peers[p] {
				out = append(out, Problem{Kind: KindAdvertisement, Object: a.Name, Field: fmt.Sprintf("spec.peers[%d]", i),
					Message: fmt.Sprintf("BGPPeer %q does not exist: nothing is advertised to it until it is created", p)})
			}
		}
		for i, p := range a.Pools {
			if !pools[p] {
				out = append(out, Problem{Kind: KindAdvertisement, Object: a.Name, Field: fmt.Sprintf("spec.pools[%d]", i),
					Message: fmt.Sprintf("LoadBalancerIPPool %q does not exist: check the name", p)})
			}
		}
	}
	return out
}

// AdvertisedPools names the pools some valid advertisement selects, sorted
// (every pool when one selects them all): `mooring doctor` leaves them out
// of its checks of L2 segments. Cost: O(A·(C+P·R)).
func AdvertisedPools(in Input) []string {
	al, _ := buildAliases(in.Communities)
	advs, _ := validateAdvertisements(in.Advertisements, al, in.Pools)
	var out []string
	for _, p := range in.Pools {
		if slices.ContainsFunc(advs, func(a *adv) bool { return a.allPools || a.pools[p.Name] }) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
