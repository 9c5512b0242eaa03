package lbipam

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// matcher answers "does this pool select this Service" for one call.
type matcher struct {
	svc    Service
	labels map[string]string // Service labels plus the virtual ones
}

func newMatcher(svc Service) *matcher {
	labels := make(map[string]string, len(svc.Labels)+2)
	for k, v := range svc.Labels {
		labels[k] = v
	}
	labels[LabelServiceNamespace] = svc.Key.Namespace
	labels[LabelServiceName] = svc.Key.Name
	return &matcher{svc: svc, labels: labels}
}

// matches ignores Disabled: a disabled pool still selects the Service, it
// just hands out nothing new.
func (m *matcher) matches(p *pool) bool {
	switch {
	case p.ignored:
		return false
	case len(m.svc.Pools) > 0 && !slices.Contains(m.svc.Pools, p.Name):
		return false
	case p.ServiceSelector != nil && !p.ServiceSelector.Matches(m.labels):
		return false
	case p.NamespaceSelector != nil && !p.NamespaceSelector.Matches(m.svc.NamespaceLabels):
		return false
	case len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, m.svc.Key.Namespace):
		return false
	case len(p.Terms) > 0 && !slices.ContainsFunc(p.Terms, m.matchesTerm):
		return false
	}
	return true
}

// matchesTerm says whether the Service matches every field t sets.
func (m *matcher) matchesTerm(t Term) bool {
	return (t.ServiceSelector == nil || t.ServiceSelector.Matches(m.labels)) &&
		(t.NamespaceSelector == nil || t.NamespaceSelector.Matches(m.svc.NamespaceLabels)) &&
		(len(t.Namespaces) == 0 || slices.Contains(t.Namespaces, m.svc.Key.Namespace))
}

// automatic reports whether p may hand the Service an address it did not
// request: autoAssign pools always, manual-only ones when the Service names
// them.
func (m *matcher) automatic(p *pool) bool {
	return !p.ManualOnly || slices.Contains(m.svc.Pools, p.Name)
}

// candidates are the enabled pools that may hand the Service an address it
// did not request, in allocation order, or the problem explaining why there
// are none; disabled are the disabled pools that select the Service, which
// every reason names.
func (a *Allocator) candidates(m *matcher) (cands, disabled []*pool, prob *Problem) {
	var manual []*pool
	for _, p := range a.pools {
		switch {
		case !m.matches(p):
		case p.Disabled:
			disabled = append(disabled, p)
		case !m.automatic(p):
			manual = append(manual, p)
		default:
			cands = append(cands, p)
		}
	}
	if len(cands) > 0 {
		return cands, disabled, nil
	}
	if len(m.svc.Pools) > 0 {
		var unknown []string
		for _, name := range m.svc.Pools {
			if !slices.ContainsFunc(a.pools, func(p *pool) bool { return p.Name == name && !p.ignored }) {
				unknown = append(unknown, name)
			}
		}
		if len(unknown) == len(m.svc.Pools) {
			return nil, disabled, poolNotFoundProblem(m.svc, unknown)
		}
	}
	return nil, disabled, noPoolProblem(m.svc, names(disabled), names(manual))
}

// decision is the plan for one family before anything is committed, so a
// RequireAllFamilies failure can roll every new address back.
type decision struct {
	fam     Family
	keep    []netip.Addr // held addresses kept
	drop    []netip.Addr // held addresses released whatever happens
	take    netip.Addr   // new address, if valid
	replace bool         // committing take releases keep (a new request)
	prob    *Problem
}

// Assign adopts svc.Held (as Import does), then gives every requested
// family without an address one, commits, and returns what the Service
// should hold. Calling it again with the same input returns the same Result.
//
// A held address is kept unless the Service stops asking for its family or
// requests another address of that family. When the requested address
// cannot be taken, the old one is KEPT and the family is listed in Pending
// with the reason, until the requested address frees up: a Service that had
// an address is never left with none.
//
// RequireAllFamilies: if any family ends up with no address, no new address
// is handed out for the others (held ones stay). Otherwise only the first
// family is required; the others are best effort and still listed in
// Pending when missing.
//
// An invalid request (two addresses of one family, an address of a family
// the Service does not ask for) gets nothing new: held addresses stay and
// every family is Pending as InvalidRequest.
func (a *Allocator) Assign(svc Service) Result {
	svc = normalize(svc)
	a.adopt(svc)
	if msg := invalidRequest(svc); msg != "" {
		return a.commit(svc, keepOnly(svc, msg))
	}
	m := newMatcher(svc)
	ds, failed := a.plan(svc, m)
	if failed != nil {
		for i := range ds {
			if d := &ds[i]; d.take.IsValid() {
				d.prob = rolledBackProblem(svc, d.fam, d.take, failed)
				d.take, d.replace = netip.Addr{}, false
			}
		}
	}
	return a.commit(svc, ds)
}

// invalidRequest says what is wrong with the Service's request, or "".
func invalidRequest(svc Service) string {
	var msgs []string
	for _, f := range []Family{IPv4, IPv6} {
		if reqs := ofFamily(svc.Requested, f); len(reqs) > 1 {
			msgs = append(msgs, twoRequestsMessage(svc, f, reqs))
		}
	}
	for _, addr := range svc.Requested {
		switch {
		case addr.Zone() != "":
			msgs = append(msgs, zonedRequestMessage(svc, addr))
		case !slices.Contains(svc.Families, FamilyOf(addr)):
			msgs = append(msgs, familyNotAskedMessage(svc, addr))
		}
	}
	return strings.Join(msgs, "; ")
}

// keepOnly is the plan for an invalid request: keep what is held, take
// nothing, every family Pending with the message.
func keepOnly(svc Service, msg string) []decision {
	ds := make([]decision, 0, len(svc.Families))
	for _, f := range svc.Families {
		ds = append(ds, decision{fam: f, keep: ofFamily(svc.Held, f),
			prob: &Problem{Family: f, Reason: ReasonInvalidRequest, Message: msg}})
	}
	return ds
}

// plan decides every family; failed is the problem of the first required
// family left without any address.
func (a *Allocator) plan(svc Service, m *matcher) ([]decision, *Problem) {
	var ds []decision
	var failed *Problem
	for i, f := range svc.Families {
		d := a.decide(svc, m, f)
		required := svc.RequireAllFamilies || i == 0
		if required && failed == nil && d.prob != nil && !d.take.IsValid() && len(d.keep) == 0 {
			failed = d.prob
		}
		ds = append(ds, d)
	}
	return ds, failed
}

func (a *Allocator) decide(svc Service, m *matcher, f Family) decision {
	d := decision{fam: f, keep: ofFamily(svc.Held, f)}
	reqs := ofFamily(svc.Requested, f) // at most one: Assign checked
	switch {
	case len(reqs) == 1 && slices.Contains(d.keep, reqs[0]):
		for _, addr := range d.keep {
			if addr != reqs[0] {
				d.drop = append(d.drop, addr)
			}
		}
		d.keep = reqs[:1]
	case len(reqs) == 1:
		if d.prob = a.checkRequested(svc, m, reqs[0]); d.prob == nil {
			d.take, d.replace = reqs[0], true
		}
	case len(d.keep) == 0:
		d.take, d.prob = a.pick(svc, m, f)
	}
	return d
}

// commit applies the plan and builds the Result.
func (a *Allocator) commit(svc Service, ds []decision) Result {
	st := a.svcs[svc.Key]
	var final []netip.Addr
	var res Result
	for _, d := range ds {
		keep := d.keep
		if d.take.IsValid() && d.replace {
			keep = nil
		}
		for _, addr := range keep {
			a.addResultAddr(&res, svc, addr, true)
		}
		final = append(final, keep...)
		if d.take.IsValid() {
			a.hold(svc.Key, d.take)
			final = append(final, d.take)
			a.addResultAddr(&res, svc, d.take, false)
		}
		if d.prob != nil {
			res.Pending = append(res.Pending, *d.prob)
		}
	}
	for _, addr := range st.held {
		if !slices.Contains(final, addr) {
			a.drop(svc.Key, addr)
		}
	}
	st.held = final
	return res
}

// checkRequested returns why the requested addr cannot be taken, or nil.
func (a *Allocator) checkRequested(svc Service, m *matcher, addr netip.Addr) *Problem {
	cov := a.covering(addr)
	if len(cov) == 0 {
		return requestedOutsideProblem(svc, addr)
	}
	own := a.owner(addr)
	if own != nil && m.matches(own) {
		if own.Disabled {
			return requestedDisabledProblem(svc, addr, own.Name)
		}
		if own.avoids(addr) {
			return requestedBuggyProblem(svc, addr, own.Name)
		}
		return a.sharingProblem(svc, addr)
	}
	for _, p := range cov {
		if m.matches(p) && rangesContain(p.usable, addr) {
			return requestedConflictingProblem(svc, addr, p.Name, p.conflicts)
		}
	}
	for _, p := range cov {
		if m.matches(p) {
			return requestedFirstLastProblem(svc, addr, p.Name)
		}
	}
	return requestedNotSelectedProblem(svc, addr, names(cov))
}

// sharingProblem says why svc may not join the holders of addr, or nil.
func (a *Allocator) sharingProblem(svc Service, addr netip.Addr) *Problem {
	for _, other := range a.holders[addr] {
		if other == svc.Key {
			continue
		}
		if ok, reason, why := compatible(svc, a.svcs[other].in); !ok {
			return inUseProblem(svc, addr, other, reason, why)
		}
	}
	return nil
}

// compatible reports whether s and h may hold one address; when not, the
// reason (RequestedInUse without a common sharing key, SharingConflict
// with one) and a clause explaining it.
func compatible(s, h Service) (bool, Reason, string) {
	if s.SharingKey == "" || s.SharingKey != h.SharingKey {
		return false, ReasonRequestedInUse, "the two Services do not have the same sharing key"
	}
	if s.Key.Namespace != h.Key.Namespace && !(sharesWith(s, h.Key.Namespace) && sharesWith(h, s.Key.Namespace)) {
		return false, ReasonSharingConflict, "they are in different namespaces and each must allow sharing with the other's namespace"
	}
	if s.SharingBackend != h.SharingBackend {
		return false, ReasonSharingConflict, "their externalTrafficPolicy differs, or it is Local and their pod selectors differ (one node must reach both)"
	}
	for _, p := range s.Ports {
		if slices.Contains(h.Ports, p) {
			return false, ReasonSharingConflict, "both expose " + p.Protocol + " port " + itoa(p.Port)
		}
	}
	return true, "", ""
}

func sharesWith(s Service, ns string) bool {
	return slices.Contains(s.SharingNamespaces, "*") || slices.Contains(s.SharingNamespaces, ns)
}

// pick finds a new address of family f: first an address already used by
// the Service's sharing key (compatible, in a candidate pool), else the
// first free address of the candidate pools in order.
func (a *Allocator) pick(svc Service, m *matcher, f Family) (netip.Addr, *Problem) {
	addr, prob := a.pickFrom(svc, m, f)
	if prob != nil {
		prob.Family = f
	}
	return addr, prob
}

// pickFrom is pick; every problem also names the disabled pools that
// select the Service (the operator may have disabled the one it needs).
func (a *Allocator) pickFrom(svc Service, m *matcher, f Family) (netip.Addr, *Problem) {
	cands, disabled, prob := a.candidates(m)
	if prob != nil {
		return netip.Addr{}, alsoDisabled(prob, disabled)
	}
	var withF []*pool
	for _, p := range cands {
		if hasFamily(p.usable, f) {
			withF = append(withF, p)
		}
	}
	if len(withF) == 0 {
		return netip.Addr{}, alsoDisabled(familyUnavailableProblem(svc, f, cands), disabled)
	}
	if addr := a.joinShared(svc, withF, f); addr.IsValid() {
		return addr, nil
	}
	if prob := a.sharingKeyConflict(svc, withF, f); prob != nil {
		return netip.Addr{}, prob
	}
	for _, p := range withF {
		for _, r := range p.eff {
			if FamilyOf(r.First) != f {
				continue
			}
			if addr, ok := a.firstFree(p, r, svc.Key); ok {
				return addr, nil
			}
		}
	}
	return netip.Addr{}, alsoDisabled(a.exhaustedProblem(svc, f, withF), disabled)
}

// firstFree returns the first address of r that is free, that p does not
// avoid, and that no other Service p serves requests. Cost: O(log n) per
// address skipped; skips are bounded by the requests and .0/.255 addresses
// in r.
func (a *Allocator) firstFree(p *pool, r ipalloc.Range, key ServiceKey) (netip.Addr, bool) {
	for {
		addr, err := a.used.FirstFree(r)
		if err != nil {
			return netip.Addr{}, false
		}
		if !p.avoids(addr) && !a.requestedByOther(addr, key, p) {
			return addr, true
		}
		if addr == r.Last {
			return netip.Addr{}, false
		}
		r.First = addr.Next()
	}
}

// sharingKeyConflict: the Service has a sharing key, other Services hold
// addresses of family f under that key in pools it may use, and it may
// join none of them (joinShared found none). It then stays pending with
// SharingConflict instead of silently getting an address of its own: a
// sharing key says "put me with the others".
func (a *Allocator) sharingKeyConflict(svc Service, pools []*pool, f Family) *Problem {
	if svc.SharingKey == "" {
		return nil
	}
	for _, k := range a.sharers(svc.SharingKey) {
		if k == svc.Key {
			continue
		}
		for _, addr := range ofFamily(a.svcs[k].held, f) {
			if own := a.owner(addr); own != nil && slices.Contains(pools, own) && !own.avoids(addr) {
				_, _, why := compatible(svc, a.svcs[k].in)
				if why == "" { // another holder of addr is the obstacle
					why = "another Service holding that address does not allow sharing"
				}
				return sharingKeyConflictProblem(svc, f, addr, k, why)
			}
		}
	}
	return nil
}

// sharers lists the Services with sharing key k, sorted, so that every
// walk over them visits them in one order whatever the map's.
func (a *Allocator) sharers(k string) []ServiceKey {
	keys := make([]ServiceKey, 0, len(a.shares[k]))
	for key := range a.shares[k] {
		keys = append(keys, key)
	}
	slices.SortFunc(keys, compareKeys)
	return keys
}

// joinShared returns the best address already held under svc's sharing
// key that svc may join: lowest pool rank, then lowest address. The
// choice is a minimum over a total order, and the holders are walked in
// sorted order, so it never depends on map order (the same address after
// every restart). Cost: O(s log s + a) for s sharers holding a addresses.
func (a *Allocator) joinShared(svc Service, pools []*pool, f Family) netip.Addr {
	if svc.SharingKey == "" {
		return netip.Addr{}
	}
	var best netip.Addr
	bestRank := len(pools)
	for _, key := range a.sharers(svc.SharingKey) {
		if key == svc.Key {
			continue
		}
		for _, addr := range ofFamily(a.svcs[key].held, f) {
			own := a.owner(addr)
			rank := slices.Index(pools, own)
			if own == nil || rank < 0 || rank > bestRank || (rank == bestRank && !addr.Less(best)) || own.avoids(addr) {
				continue
			}
			if a.sharingProblem(svc, addr) == nil {
				best, bestRank = addr, rank
			}
		}
	}
	return best
}

func names(ps []*pool) []string {
	out := make([]string, 0, len(ps))
	for _, p := range ps {
		out = append(out, p.Name)
	}
	return out
}
