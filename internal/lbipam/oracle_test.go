package lbipam

import (
	"net/netip"
	"slices"
	"strings"
)

// The oracle re-derives, by plain enumeration over the tiny address space of
// the property test, whether a reason the allocator gave is true.

func (w *world) poolList() []Pool {
	var ps []Pool
	for _, p := range w.pools {
		ps = append(ps, p)
	}
	return ps
}

func oValidBlocks(p Pool) []Block {
	var out []Block
	for _, b := range p.Blocks {
		if b.Last.Less(b.First) || b.First.Is4() != b.Last.Is4() {
			continue
		}
		if slices.ContainsFunc(out, func(o Block) bool {
			return o.First.Is4() == b.First.Is4() && !o.Last.Less(b.First) && !b.Last.Less(o.First)
		}) {
			continue
		}
		out = append(out, b)
	}
	return out
}

// oSpace is every address a pool of the property test can hold: the CIDR
// blocks it draws (/26 and longer around base4 and base6) cover
// 10.0.0.192-10.0.1.63 and 2001:db8::-2001:db8::3f.
func oSpace(f Family) []netip.Addr {
	first, n := netip.MustParseAddr("10.0.0.192"), 128
	if f == IPv6 {
		first, n = base6, 64
	}
	out := make([]netip.Addr, 0, n)
	for x := first; len(out) < n; x = x.Next() {
		out = append(out, x)
	}
	return out
}

func oInBlock(b Block, x netip.Addr) bool {
	return x.Is4() == b.First.Is4() && !x.Less(b.First) && !b.Last.Less(x)
}

func oCovers(p Pool, x netip.Addr) bool {
	return slices.ContainsFunc(oValidBlocks(p), func(b Block) bool { return oInBlock(b, x) })
}

func oUsable(p Pool, x netip.Addr) bool {
	for _, b := range oValidBlocks(p) {
		if !oInBlock(b, x) {
			continue
		}
		pointToPoint := b.Bits >= x.BitLen()-1
		if !b.FromCIDR || p.AllowFirstLastIPs || pointToPoint || (x != b.First && x != b.Last) {
			return true
		}
	}
	return false
}

func oOlder(p, q Pool) bool {
	return p.Created.Before(q.Created) || (p.Created.Equal(q.Created) && p.Name < q.Name)
}

// oOwner: the pool that hands x out, if any: x is usable in it and no older
// pool's block covers x.
func oOwner(ps []Pool, x netip.Addr) (Pool, bool) {
	for _, p := range ps {
		if !oUsable(p, x) {
			continue
		}
		if !slices.ContainsFunc(ps, func(o Pool) bool { return oOlder(o, p) && oCovers(o, x) }) {
			return p, true
		}
	}
	return Pool{}, false
}

func oMatches(p Pool, s Service) bool {
	if len(s.Pools) > 0 && !slices.Contains(s.Pools, p.Name) {
		return false
	}
	if len(p.Namespaces) > 0 && !slices.Contains(p.Namespaces, s.Key.Namespace) {
		return false
	}
	if p.NamespaceSelector != nil && !p.NamespaceSelector.Matches(s.NamespaceLabels) {
		return false
	}
	labels := map[string]string{LabelServiceNamespace: s.Key.Namespace, LabelServiceName: s.Key.Name}
	for k, v := range s.Labels {
		labels[k] = v
	}
	return p.ServiceSelector == nil || p.ServiceSelector.Matches(labels)
}

// oAuto: p may hand s an address s did not request: it selects s, is
// enabled, and assigns automatically or is named by s.
func oAuto(p Pool, s Service) bool {
	return oMatches(p, s) && !p.Disabled && (!p.ManualOnly || slices.Contains(s.Pools, p.Name))
}

// oAvoids: avoidBuggyIPs and x ends in .0 or .255.
func oAvoids(p Pool, x netip.Addr) bool {
	if !p.AvoidBuggyIPs || !x.Is4() {
		return false
	}
	b := x.As4()
	return b[3] == 0 || b[3] == 255
}

// oBefore: p is tried before q. Pools with a priority come first, lower
// number first; then older first; then by name.
func oBefore(p, q Pool) bool {
	switch {
	case p.Priority != nil && q.Priority == nil:
		return true
	case p.Priority == nil && q.Priority != nil:
		return false
	case p.Priority != nil && *p.Priority != *q.Priority:
		return *p.Priority < *q.Priority
	}
	return oOlder(p, q)
}

// oInvalid: the request names two addresses of one family, or an address
// of a family the Service does not ask for.
func oInvalid(s Service) bool {
	for _, f := range []Family{IPv4, IPv6} {
		reqs := slices.Compact(ofFamily(s.Requested, f))
		if len(reqs) > 1 || len(reqs) == 1 && !slices.Contains(s.Families, f) {
			return true
		}
	}
	return false
}

// requestedByOther: another Service requests x with a request that
// reserves it: the request is valid and x's owner selects that Service (a
// request no pool could grant reserves nothing: no squatting).
func (w *world) requestedByOther(s Service, x netip.Addr) bool {
	owner, ok := oOwner(w.poolList(), x)
	if !ok {
		return false
	}
	for k, o := range w.svcs {
		if k != s.Key && slices.Contains(o.Requested, x) && !oInvalid(o) && oMatches(owner, o) {
			return true
		}
	}
	return false
}

// freeFor: x is an address s could be given fresh: its owner may hand it
// to s automatically, nobody holds it, it is not avoided and no other
// Service requests it.
func (w *world) freeFor(s Service, ps []Pool, x netip.Addr) (Pool, bool) {
	owner, ok := oOwner(ps, x)
	if !ok || !oAuto(owner, s) || oAvoids(owner, x) || len(w.othersHolding(s, x)) > 0 || w.requestedByOther(s, x) {
		return Pool{}, false
	}
	return owner, true
}

// keyAddrs lists the addresses of family f that Services with s's sharing
// key hold in pools that may hand s an address, and whether s may join
// each (every holder agrees).
func (w *world) keyAddrs(s Service, ps []Pool, f Family) (joinable, blocked []netip.Addr) {
	if s.SharingKey == "" {
		return nil, nil
	}
	for _, x := range oSpace(f) {
		owner, ok := oOwner(ps, x)
		others := w.othersHolding(s, x)
		if !ok || !oAuto(owner, s) || oAvoids(owner, x) || !slices.ContainsFunc(others, func(o Service) bool { return o.SharingKey == s.SharingKey }) {
			continue
		}
		if slices.ContainsFunc(others, func(o Service) bool { return !mayShare(s, o) }) {
			blocked = append(blocked, x)
		} else {
			joinable = append(joinable, x)
		}
	}
	return joinable, blocked
}

// grantProblem says why giving x to s (which did not hold it) breaks a
// rule, or "": the request is valid; x's owner (the oldest pool covering
// it, where it is usable) is enabled, selects s and does not avoid x; a
// requested address may come from a manual-only pool, any other only from
// an automatic one; an address held by others is shared by agreement; a
// fresh address is no other Service's request, comes only when no address
// of s's sharing key exists, and from no pool that ranks after one that
// still had a free address for s.
func (w *world) grantProblem(s Service, x netip.Addr) string {
	if oInvalid(s) {
		return "the request is invalid: nothing new may be assigned"
	}
	ps := w.poolList()
	owner, ok := oOwner(ps, x)
	switch {
	case !ok:
		return "no pool hands it out (outside every pool, a first/last address, or in a newer pool's lost overlap)"
	case owner.Disabled:
		return "its pool " + owner.Name + " is disabled"
	case !oMatches(owner, s):
		return "its pool " + owner.Name + " does not select the Service"
	case oAvoids(owner, x):
		return "its pool " + owner.Name + " avoids .0 and .255"
	}
	others := w.othersHolding(s, x)
	for _, o := range others {
		if !mayShare(s, o) {
			return o.Key.String() + " holds it without a sharing agreement"
		}
	}
	if slices.Contains(s.Requested, x) {
		return ""
	}
	if !oAuto(owner, s) {
		return "pool " + owner.Name + " hands out addresses only on request"
	}
	if len(others) > 0 {
		return "" // joined under the sharing key
	}
	f := FamilyOf(x)
	if w.requestedByOther(s, x) {
		return "another Service requests it"
	}
	if joinable, blocked := w.keyAddrs(s, ps, f); len(joinable) > 0 {
		return "it should have joined " + joinable[0].String() + " under its sharing key"
	} else if len(blocked) > 0 {
		return "its sharing key's address " + blocked[0].String() + " cannot take it: SharingConflict expected"
	}
	for _, y := range oSpace(f) {
		if q, ok := w.freeFor(s, ps, y); ok && q.Name != owner.Name && oBefore(q, owner) {
			return "pool " + q.Name + " ranks before " + owner.Name + " and has " + y.String() + " free"
		}
	}
	return ""
}

func (w *world) othersHolding(in Service, x netip.Addr) []Service {
	var out []Service
	for k, held := range w.held {
		if k != in.Key && slices.Contains(held, x) {
			out = append(out, w.svcs[k])
		}
	}
	return out
}

func (w *world) checkPending(in Service, res Result) {
	for _, f := range in.Families {
		has := slices.ContainsFunc(res.Addrs, func(a netip.Addr) bool { return FamilyOf(a) == f })
		pend := slices.ContainsFunc(res.Pending, func(p Problem) bool { return p.Family == f })
		if !has && !pend {
			w.t.Errorf("%s: IPv%d has neither an address nor a reason: %+v", in.Key, f, res)
		}
	}
	w.checkWarnings(in, res)
	for _, p := range res.Pending {
		if !strings.Contains(p.Message, in.Key.String()) {
			w.t.Errorf("%s: message does not name the Service: %q", in.Key, p.Message)
		}
		if strings.Contains(p.Message, "requires all its IP families") {
			if !slices.ContainsFunc(res.Pending, func(q Problem) bool { return q.Family != p.Family && q.Reason == p.Reason }) {
				w.t.Errorf("%s: rolled back without a blocking family: %+v", in.Key, res.Pending)
			}
			continue
		}
		if why := w.falseReason(in, p); why != "" {
			w.t.Errorf("%s: reason %s for IPv%d is false: %s\n%+v\nmessage: %s", in.Key, p.Reason, p.Family, why, in, p.Message)
		}
	}
}

// falseReason returns why p is not true for in, or "".
func (w *world) falseReason(in Service, p Problem) string {
	ps := w.poolList()
	var enabled []Pool // pools that may assign automatically
	for _, q := range ps {
		if oAuto(q, in) {
			enabled = append(enabled, q)
		}
	}
	reqs := slices.Compact(ofFamily(in.Requested, p.Family)) // equal requests are one
	var r netip.Addr
	if len(reqs) == 1 {
		r = reqs[0]
	}
	owner, owned := oOwner(ps, r)
	switch p.Reason {
	case ReasonNoPoolMatches:
		if len(enabled) > 0 {
			return "an enabled pool matches"
		}
	case ReasonPoolNotFound:
		if slices.ContainsFunc(ps, func(q Pool) bool { return slices.Contains(in.Pools, q.Name) }) {
			return "a named pool exists"
		}
	case ReasonFamilyUnavailable:
		for _, q := range enabled {
			if slices.ContainsFunc(oValidBlocks(q), func(b Block) bool { return FamilyOf(b.First) == p.Family }) {
				return "pool " + q.Name + " has the family"
			}
		}
	case ReasonPoolExhausted:
		return w.exhaustedIsFalse(in, p.Family, ps, enabled)
	case ReasonRequestedOutside:
		if slices.ContainsFunc(ps, func(q Pool) bool { return oCovers(q, r) }) {
			return "a pool covers it"
		}
	case ReasonRequestedDisabled:
		if !owned || !owner.Disabled || !oMatches(owner, in) {
			return "its owner is not a disabled matching pool"
		}
	case ReasonRequestedConflicting:
		if owned && oMatches(owner, in) || !slices.ContainsFunc(ps, func(q Pool) bool { return oMatches(q, in) && oUsable(q, r) }) {
			return "not in a matching pool's lost overlap"
		}
	case ReasonRequestedNotAllowed:
		if owned && oMatches(owner, in) && !oAvoids(owner, r) || !slices.ContainsFunc(ps, func(q Pool) bool { return oCovers(q, r) }) {
			return "a matching pool owns it, or no pool covers it"
		}
	case ReasonSharingConflict:
		if !r.IsValid() {
			if _, blocked := w.keyAddrs(in, ps, p.Family); len(blocked) == 0 {
				return "no address of its sharing key blocks it"
			}
			break
		}
		if !slices.ContainsFunc(w.othersHolding(in, r), func(o Service) bool { return !mayShare(in, o) }) {
			return "no incompatible holder"
		}
	case ReasonRequestedInUse:
		if !slices.ContainsFunc(w.othersHolding(in, r), func(o Service) bool { return !mayShare(in, o) }) {
			return "no incompatible holder"
		}
	case ReasonInvalidRequest:
		if !oInvalid(in) {
			return "the request is fine"
		}
	default:
		return "unexpected reason"
	}
	return ""
}

// exhaustedIsFalse: every address of the family in an enabled matching
// pool is held, and (with a sharing key) none may be joined.
func (w *world) exhaustedIsFalse(in Service, f Family, ps, enabled []Pool) string {
	if joinable, blocked := w.keyAddrs(in, ps, f); len(joinable)+len(blocked) > 0 {
		return "its sharing key holds addresses: joined or SharingConflict expected"
	}
	for _, x := range oSpace(f) {
		owner, ok := oOwner(ps, x)
		if !ok || !slices.ContainsFunc(enabled, func(q Pool) bool { return q.Name == owner.Name }) {
			continue
		}
		others := w.othersHolding(in, x)
		if len(others) == 0 && !oAvoids(owner, x) && !w.requestedByOther(in, x) {
			return x.String() + " is free in pool " + owner.Name
		}
		// An address the pool avoids (avoidBuggyIPs: .0, .255) is joined
		// by no one, as keyAddrs says: its holders got it before the pool
		// avoided it, or by request.
		if len(others) > 0 && in.SharingKey != "" && !oAvoids(owner, x) && !slices.ContainsFunc(others, func(o Service) bool { return !mayShare(in, o) }) {
			return x.String() + " could be shared"
		}
	}
	return ""
}

// checkWarnings counts the warnings each kept address deserves.
func (w *world) checkWarnings(in Service, res Result) {
	wantOutside, wantDup := 0, 0
	for _, x := range res.Addrs {
		if !slices.Contains(in.Held, x) {
			continue
		}
		if !slices.ContainsFunc(w.poolList(), func(q Pool) bool { return oCovers(q, x) }) {
			wantOutside++
		}
		for _, o := range w.othersHolding(in, x) {
			if !mayShare(in, o) {
				wantDup++
			}
		}
	}
	gotOutside, gotDup := 0, 0
	for _, p := range res.Warnings {
		switch p.Reason {
		case ReasonHeldOutsidePools:
			gotOutside++
		case ReasonHeldDuplicate:
			gotDup++
		default:
			w.t.Errorf("%s: unexpected warning %+v", in.Key, p)
		}
	}
	if gotOutside != wantOutside || gotDup != wantDup {
		w.t.Errorf("%s: warnings outside=%d duplicate=%d, want %d and %d: %+v", in.Key, gotOutside, gotDup, wantOutside, wantDup, res.Warnings)
	}
}
