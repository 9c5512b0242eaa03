package announce

import (
	"fmt"
	"maps"
	"net/netip"
	"reflect"
	"slices"
)

// State is the decision kept up to date change by change: each Set call
// re-decides only the addresses the change can affect and returns them.
// Rendezvous ranking makes every address independent, so a Service event
// touches that Service's addresses and a member leaving touches only the
// addresses it was eligible for. Decide is the oracle: after any sequence
// of calls, Result equals Decide of the same input (state_test.go).
//
// Eligibility is kept per address as a set of known nodes NOT masked by
// liveness, so membership changes never rebuild it. Node, policy and
// interface changes are rare and rebuild what they touch.
//
// A State is not safe for concurrent use.
type State struct {
	local    string
	ifaces   []Interface
	policies []Policy
	nodes    []Node // sorted by name

	caps        Capabilities // SetCapabilities (eligibility.go); nil: no filter
	pols        []*policy
	polProblems []Problem
	u           *universe // every known node, live or not
	live        nodeSet
	members     []string // sorted, deduplicated

	services map[ServiceKey]*svcEntry
	addrs    map[netip.Addr]*addrEntry
	listen   []Interface
}

type svcEntry struct {
	// svc is the caller's (SetService): shared with the BGP backend, one
	// Service struct per Service in the agent instead of one per consumer.
	svc *Service
	// addrs is a slice, not a map: a Service has one or two addresses, and
	// a small map costs a full group of eight slots (~650 bytes) per
	// Service, half the state at 10,000 Services.
	addrs []svcAddr
}

// svcAddr is one Service's claim on one address: the known nodes that may
// announce it for this Service and the policies that announce it.
type svcAddr struct {
	addr netip.Addr
	el   nodeSet
	pols []*policy
}

// claimOn returns e's claim on a, if any.
func (e *svcEntry) claimOn(a netip.Addr) (svcAddr, bool) {
	if e == nil {
		return svcAddr{}, false
	}
	for _, c := range e.addrs {
		if c.addr == a {
			return c, true
		}
	}
	return svcAddr{}, false
}

type addrEntry struct {
	services []ServiceKey // sorted
	base     nodeSet      // intersection of the Services' eligibility
	owner    int          // index into u, -1 when none
	score    uint64       // the owner's score
	metallb  bool         // rankingOf the policies of every claim is MetalLB
	eligible int
	local    []Entry
	problem  *Problem
}

// Change is one address whose owner, Services or local entries changed.
// From and To are the owner before and after ("" when none or when the
// address was not or is no longer announced).
type Change struct {
	Addr     netip.Addr
	From, To string
}

// NewState returns the decision of the local node with no input yet.
func NewState(local string) *State {
	s := &State{local: local, services: map[ServiceKey]*svcEntry{}, addrs: map[netip.Addr]*addrEntry{}}
	s.rebuild()
	return s
}

// SetService adds or replaces one Service (its EndpointSlices folded into
// ReadyNodes). The state keeps svc: the caller must not change it
// afterwards (a changed Service is a new *Service). Cost: O(P + A·N/64)
// for P policies, A addresses of the Service (and of the Services sharing
// them) and N known nodes.
func (s *State) SetService(svc *Service) []Change {
	old := s.services[svc.Key]
	e := s.claim(svc)
	s.services[svc.Key] = e
	return s.touch(svc.Key, old, e)
}

// DeleteService removes one Service. Cost: as SetService.
func (s *State) DeleteService(k ServiceKey) []Change {
	old, ok := s.services[k]
	if !ok {
		return nil
	}
	delete(s.services, k)
	return s.touch(k, old, nil)
}

// SetMembers replaces the live gossip members. Only addresses a joining or
// leaving node is eligible for are re-ranked, and only against that node
// unless it was the owner. Cost: O(A·N/64) bit tests, plus O(E) scores per
// address whose owner left.
func (s *State) SetMembers(members []string) []Change {
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	if slices.Equal(ms, s.members) {
		return nil
	}
	s.members = ms
	next := s.liveSet()
	left, joined := newNodeSet(len(s.u.names)), newNodeSet(len(s.u.names))
	for i := range next {
		left[i] = s.live[i] &^ next[i]
		joined[i] = next[i] &^ s.live[i]
	}
	s.live = next
	var out []Change
	for a, e := range s.addrs {
		if !e.base.intersects(left) && !e.base.intersects(joined) {
			continue
		}
		before := e.owner
		e.eligible = e.base.andCount(s.live)
		if e.owner >= 0 && !left.has(e.owner) {
			key := s.metallbKey(a, e)
			for j := range e.base.andEach(joined) {
				if sc := s.u.score(e.ranking(), j, a, key); sc > e.score || (sc == e.score && j < e.owner) {
					e.owner, e.score = j, sc
				}
			}
		} else {
			s.rank(a, e)
		}
		if e.owner != before {
			s.finish(a, e)
			out = append(out, Change{Addr: a, From: s.name(before), To: s.name(e.owner)})
		}
	}
	return out
}

// SetNodes replaces the known Nodes. A change that alters no policy's node
// selection and no node's presence costs nothing beyond the comparison;
// otherwise every address is re-decided. Cost: O(N·P) to compare.
func (s *State) SetNodes(nodes []Node) []Change {
	ns := slices.Clone(nodes)
	slices.SortStableFunc(ns, func(a, b Node) int { return compareStrings(a.Name, b.Name) })
	if slices.EqualFunc(ns, s.nodes, func(a, b Node) bool { return a.Name == b.Name && maps.Equal(a.Labels, b.Labels) }) {
		return nil
	}
	same := sameSelection(s.pols, ns, s.u, s.caps)
	s.nodes = ns
	if same {
		return nil
	}
	return s.rebuildAll()
}

// SetPolicies replaces the policies; unless they are equal to the current
// ones, every address is re-decided.
func (s *State) SetPolicies(pols []Policy) []Change {
	if reflect.DeepEqual(pols, s.policies) || (len(pols) == 0 && len(s.policies) == 0) {
		return nil
	}
	s.policies = slices.Clone(pols)
	return s.rebuildAll()
}

// SetInterfaces replaces the local interfaces; only the addresses the local
// node owns are re-decided.
func (s *State) SetInterfaces(ifaces []Interface) []Change {
	if slices.Equal(ifaces, s.ifaces) {
		return nil
	}
	s.ifaces = slices.Clone(ifaces)
	s.listen = listen(s.pols, s.ifaces)
	local := s.u.indexOf(s.local)
	var out []Change
	for a, e := range s.addrs {
		if local >= 0 && e.owner == local {
			before := e.local
			s.finish(a, e)
			if !slices.Equal(before, e.local) {
				out = append(out, Change{Addr: a, From: s.local, To: s.local})
			}
		}
	}
	return out
}

// Input returns the state's input, for Decide.
func (s *State) Input() Input {
	in := Input{Policies: slices.Clone(s.policies), Nodes: slices.Clone(s.nodes), Members: slices.Clone(s.members),
		Local: s.local, Interfaces: slices.Clone(s.ifaces), Capabilities: maps.Clone(s.caps)}
	for _, k := range slices.SortedFunc(maps.Keys(s.services), compareKeys) {
		in.Services = append(in.Services, *s.services[k].svc)
	}
	return in
}

// Capabilities returns the capabilities last set; the map is replaced, never
// changed in place, so callers may keep it but must not change it.
func (s *State) Capabilities() Capabilities { return s.caps }

// Listen returns Result.Listen: the local interfaces any valid policy names.
func (s *State) Listen() []Interface { return slices.Clone(s.listen) }

// Members returns the live members, sorted.
func (s *State) Members() []string { return slices.Clone(s.members) }

// HasService reports whether the Service k is in the state.
func (s *State) HasService(k ServiceKey) bool { return hasKey(s.services, k) }

// ServiceKeys returns the keys of every Service in the state, unsorted.
func (s *State) ServiceKeys() []ServiceKey { return slices.Collect(maps.Keys(s.services)) }

// Len returns the number of announced addresses.
func (s *State) Len() int { return len(s.addrs) }

// Owner returns the owner of addr ("" if none) and whether it is announced.
// Cost: O(1).
func (s *State) Owner(a netip.Addr) (string, bool) {
	e, ok := s.addrs[a.Unmap()]
	if !ok {
		return "", false
	}
	return s.name(e.owner), true
}

// Desired is the local table grouped by interface index, as Result.Desired.
// Cost: O(A + L log L) for L local entries.
func (s *State) Desired() map[int][]netip.Addr {
	var local []Entry
	for _, e := range s.addrs {
		local = append(local, e.local...)
	}
	return Result{Local: sortEntries(local)}.Desired()
}

// Local returns the local entries of one address (nil when this node does
// not announce it), for an adapter that follows the Changes one address
// at a time instead of rebuilding Desired. Cost: O(1). The slice is
// replaced, never modified, so the caller may keep it.
func (s *State) Local(a netip.Addr) []Entry {
	if e := s.addrs[a]; e != nil {
		return e.local
	}
	return nil
}

// Result materialises the whole decision, equal to Decide(s.Input()).
// Cost: O(A log A).
func (s *State) Result() Result {
	res := Result{Problems: slices.Clone(s.polProblems), Listen: slices.Clone(s.listen), StatusWriter: s.statusWriter(),
		Owners: make([]Owner, 0, len(s.addrs))}
	if len(s.addrs) == 0 {
		res.Owners = nil
	}
	for _, a := range slices.SortedFunc(maps.Keys(s.addrs), netip.Addr.Compare) {
		e := s.addrs[a]
		// e.services is never changed in place (touch replaces it), so the
		// Result may share it.
		res.Owners = append(res.Owners, Owner{Addr: a, Node: s.name(e.owner), Services: e.services, Eligible: e.eligible})
		res.Local = append(res.Local, e.local...)
		if e.problem != nil {
			res.Problems = append(res.Problems, *e.problem)
		}
	}
	res.Local = sortEntries(res.Local)
	sortProblems(res.Problems)
	res.Problems = slices.Compact(res.Problems)
	return res
}

func (s *State) name(i int) string {
	if i < 0 {
		return ""
	}
	return s.u.names[i]
}

func (s *State) liveSet() nodeSet {
	live := newNodeSet(len(s.u.names))
	for _, m := range s.members {
		if i := s.u.indexOf(m); i >= 0 {
			live.add(i)
		}
	}
	return live
}

func (s *State) statusWriter() string {
	any := newNodeSet(len(s.u.names))
	for _, p := range s.pols {
		any.or(p.nodes)
	}
	for i := range any.andEach(s.live) {
		return s.u.names[i]
	}
	for i := range s.live.andEach(s.live) {
		return s.u.names[i]
	}
	return ""
}

// claim computes which addresses svc announces and who may announce each.
func (s *State) claim(svc *Service) *svcEntry {
	e := &svcEntry{svc: svc}
	var ready nodeSet
	if svc.LocalTraffic {
		ready = newNodeSet(len(s.u.names))
		for _, n := range svc.ReadyNodes {
			if j := s.u.indexOf(n); j >= 0 {
				ready.add(j)
			}
		}
	}
	for a, ps := range policiesByAddr(svc, s.pols) {
		el := newNodeSet(len(s.u.names))
		for _, p := range ps {
			el.or(p.nodes)
		}
		if ready != nil {
			el.and(ready)
		}
		e.addrs = append(e.addrs, svcAddr{addr: a, el: el, pols: ps})
	}
	return e
}

// touch re-decides the addresses old and e (one Service before and after)
// claim.
func (s *State) touch(k ServiceKey, old, e *svcEntry) []Change {
	var affected []netip.Addr
	if old != nil {
		for _, c := range old.addrs {
			affected = append(affected, c.addr)
		}
	}
	if e != nil {
		for _, c := range e.addrs {
			if _, ok := old.claimOn(c.addr); !ok {
				affected = append(affected, c.addr)
			}
		}
	}
	var out []Change
	for _, a := range affected {
		ae := s.addrs[a]
		before, services, local := -1, []ServiceKey(nil), []Entry(nil)
		if ae != nil {
			before, services, local = ae.owner, ae.services, ae.local
		}
		_, holds := e.claimOn(a)
		next := slices.DeleteFunc(slices.Clone(services), func(x ServiceKey) bool { return x == k })
		if holds {
			i, _ := slices.BinarySearchFunc(next, k, compareKeys)
			next = slices.Insert(next, i, k)
		}
		if len(next) == 0 {
			delete(s.addrs, a)
			if ae != nil {
				out = append(out, Change{Addr: a, From: s.name(before)})
			}
			continue
		}
		if ae == nil {
			ae = &addrEntry{}
			s.addrs[a] = ae
		}
		ae.services = next
		s.decideAddr(a, ae)
		if ae.owner != before || !slices.Equal(services, next) || !slices.Equal(local, ae.local) {
			out = append(out, Change{Addr: a, From: s.name(before), To: s.name(ae.owner)})
		}
	}
	return out
}

func hasKey[M ~map[K]V, K comparable, V any](m M, k K) bool { _, ok := m[k]; return ok }

// decideAddr recomputes one address from the Services holding it.
func (s *State) decideAddr(a netip.Addr, e *addrEntry) {
	e.base, e.metallb = nil, false
	for _, k := range e.services {
		c, _ := s.services[k].claimOn(a)
		e.metallb = e.metallb || rankingOf(c.pols) == RankingMetalLB
		el := c.el
		if e.base == nil {
			e.base = slices.Clone(el)
		} else {
			e.base.and(el)
		}
	}
	e.eligible = e.base.andCount(s.live)
	s.rank(a, e)
	s.finish(a, e)
}

// rank picks the owner among the live eligible nodes; ties go to the
// smaller name (indices are in name order).
func (s *State) rank(a netip.Addr, e *addrEntry) {
	e.owner, e.score = -1, 0
	key := s.metallbKey(a, e)
	for i := range e.base.andEach(s.live) {
		if sc := s.u.score(e.ranking(), i, a, key); e.owner < 0 || sc > e.score {
			e.owner, e.score = i, sc
		}
	}
}

func (e *addrEntry) ranking() Ranking {
	if e.metallb {
		return RankingMetalLB
	}
	return RankingMooring
}

// metallbKey is what MetalLB hashes for a: the metallbKey of the first
// Service (by key) holding it, as Decide takes it. Computed on demand, so
// the state holds no more per address.
func (s *State) metallbKey(a netip.Addr, e *addrEntry) netip.Addr {
	if !e.metallb || len(e.services) == 0 {
		return a
	}
	if se := s.services[e.services[0]]; se != nil {
		return metallbKey(se.svc, a)
	}
	return a
}

// finish derives the local entries and the problem of one address from its
// owner.
func (s *State) finish(a netip.Addr, e *addrEntry) {
	e.local, e.problem = nil, nil
	switch local := s.u.indexOf(s.local); {
	case e.owner < 0:
		e.problem = &Problem{Addr: a, Message: fmt.Sprintf(
			"no live node may announce %s for %s: check the policies' nodeSelector, the nodes' gossip and, for externalTrafficPolicy: Local, the ready endpoints", a, keyList(e.services))}
	case e.owner == local:
		st := &addrState{localPols: map[*policy]bool{}}
		for _, k := range e.services {
			c, _ := s.services[k].claimOn(a)
			for _, p := range c.pols {
				if p.nodes.has(local) {
					st.localPols[p] = true
				}
			}
		}
		var probs []Problem
		e.local, probs = localEntries(nil, nil, a, st, s.ifaces, s.caps.interfaceMatcher(s.local))
		if len(probs) > 0 {
			e.problem = &probs[0]
		}
	}
}

// rebuild recomputes everything but the Services' input from scratch.
func (s *State) rebuild() {
	var names []string
	for _, n := range s.nodes {
		names = append(names, n.Name)
	}
	s.u = newUniverse(s.nodes, names)
	s.pols, s.polProblems = compile(s.policies)
	selectNodes(s.pols, s.nodes, s.u, s.caps)
	s.live = s.liveSet()
	s.listen = listen(s.pols, s.ifaces)
}

// rebuildAll re-decides every address and returns what changed.
func (s *State) rebuildAll() []Change {
	type was struct {
		owner    string
		services []ServiceKey
		local    []Entry
	}
	before := make(map[netip.Addr]was, len(s.addrs))
	for a, e := range s.addrs {
		before[a] = was{s.name(e.owner), e.services, e.local}
	}
	s.rebuild()
	s.addrs = make(map[netip.Addr]*addrEntry, len(before))
	for k, e := range s.services {
		*e = *s.claim(e.svc)
		for _, c := range e.addrs {
			a := c.addr
			ae := s.addrs[a]
			if ae == nil {
				ae = &addrEntry{}
				s.addrs[a] = ae
			}
			ae.services = append(ae.services, k)
		}
	}
	var out []Change
	for a, e := range s.addrs {
		slices.SortFunc(e.services, compareKeys)
		s.decideAddr(a, e)
		w, ok := before[a]
		if !ok || w.owner != s.name(e.owner) || !slices.Equal(w.services, e.services) || !slices.Equal(w.local, e.local) {
			out = append(out, Change{Addr: a, From: w.owner, To: s.name(e.owner)})
		}
	}
	for a, w := range before {
		if !hasKey(s.addrs, a) {
			out = append(out, Change{Addr: a, From: w.owner})
		}
	}
	return out
}

// sameSelection reports whether nodes (sorted) select exactly the nodes
// each policy selects now, with the same universe.
func sameSelection(pols []*policy, nodes []Node, u *universe, caps Capabilities) bool {
	if len(nodes) != len(u.names) {
		return false
	}
	for i, n := range nodes {
		if u.names[i] != n.Name {
			return false
		}
	}
	for _, p := range pols {
		for i, n := range nodes {
			if (p.NodeSelector.Matches(n.Labels) && caps.canServe(p, n.Name)) != p.nodes.has(i) {
				return false
			}
		}
	}
	return true
}

func sortEntries(es []Entry) []Entry {
	slices.SortFunc(es, func(x, y Entry) int {
		if x.IfIndex != y.IfIndex {
			return x.IfIndex - y.IfIndex
		}
		return x.Addr.Compare(y.Addr)
	})
	return slices.Compact(es)
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
