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
	labels := map[string]string{LabelServiceNamespace: s.Key.Namespace, LabelServiceName: s.Key.Name}
	for k, v := range s.Labels {
		labels[k] = v
	}
	return p.ServiceSelector == nil || p.ServiceSelector.Matches(labels)
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
	var enabled []Pool
	for _, q := range ps {
		if oMatches(q, in) && !q.Disabled {
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
		if owned && oMatches(owner, in) || !slices.ContainsFunc(ps, func(q Pool) bool { return oCovers(q, r) }) {
			return "a matching pool owns it, or no pool covers it"
		}
	case ReasonRequestedInUse, ReasonSharingConflict:
		if !slices.ContainsFunc(w.othersHolding(in, r), func(o Service) bool { return !mayShare(in, o) }) {
			return "no incompatible holder"
		}
	case ReasonInvalidRequest:
		if len(reqs) < 2 && slices.Contains(in.Families, p.Family) {
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
	for i := 0; i < 64; i++ {
		x := nth(f, i)
		owner, ok := oOwner(ps, x)
		if !ok || !slices.ContainsFunc(enabled, func(q Pool) bool { return q.Name == owner.Name }) {
			continue
		}
		others := w.othersHolding(in, x)
		if len(others) == 0 {
			return x.String() + " is free in pool " + owner.Name
		}
		if in.SharingKey != "" && !slices.ContainsFunc(others, func(o Service) bool { return !mayShare(in, o) }) {
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
