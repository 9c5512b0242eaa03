package lbipam

import (
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// Virtual labels every Service carries for ServiceSelector matching, so a
// pool can select Services by namespace or name without real labels.
const (
	LabelServiceNamespace = "mooring.dev/service-namespace"
	LabelServiceName      = "mooring.dev/service-name"
)

// Allocator holds the pool set and who holds which address. Its memory is
// proportional to the number of pools, blocks, Services and USED addresses,
// never to the size of a block.
type Allocator struct {
	pools   []*pool // allocation order
	used    ipalloc.Set
	holders map[netip.Addr][]ServiceKey // sorted keys; only used addresses
	svcs    map[ServiceKey]*svcState
	shares  map[string]map[ServiceKey]struct{} // sharing key -> Services
	// requests indexes the addresses Services ask for, so automatic
	// allocation never takes an address a known Service may get by request,
	// whatever order the Services are looked at in. An entry reserves the
	// address only while the request is valid and the owning pool serves
	// that Service (reservesIn): otherwise any tenant could squat on
	// another tenant's pool by naming its addresses.
	requests map[netip.Addr][]ServiceKey
}

// svcState is the last input seen for a Service and what it holds.
type svcState struct {
	in   Service
	held []netip.Addr
}

// NewAllocator returns an allocator with no pools and no Services.
func NewAllocator() *Allocator {
	return &Allocator{
		holders: map[netip.Addr][]ServiceKey{},
		svcs:    map[ServiceKey]*svcState{},
		shares:  map[string]map[ServiceKey]struct{}{},

		requests: map[netip.Addr][]ServiceKey{},
	}
}

// Import adopts the addresses the Service holds exactly as they are, even
// outside every pool (Warning HeldOutsidePools) or held by another Service
// that sharing does not allow (Warning HeldDuplicate; both keep it). It
// allocates nothing and replaces what the core recorded for the Service
// before. Result.Pending is always empty: Assign computes it.
func (a *Allocator) Import(svc Service) Result {
	svc = normalize(svc)
	a.adopt(svc)
	var res Result
	for _, addr := range orderByFamilies(svc.Held, svc.Families) {
		a.addResultAddr(&res, svc, addr, true)
	}
	return res
}

// Release frees everything the Service holds and forgets it.
func (a *Allocator) Release(key ServiceKey) {
	st := a.svcs[key]
	if st == nil {
		return
	}
	for _, addr := range st.held {
		a.drop(key, addr)
	}
	a.setShare(key, st.in.SharingKey, "")
	a.setRequests(key, st.in.Requested, nil)
	delete(a.svcs, key)
}

// Holders returns the Services holding addr, sorted (a copy).
func (a *Allocator) Holders(addr netip.Addr) []ServiceKey {
	return slices.Clone(a.holders[addr.Unmap()])
}

// normalize copies the Service with addresses unmapped and deduplicated and
// Families cleaned. Empty Families are inferred from the requested, then the
// held addresses, else IPv4, so a caller that forgets spec.ipFamilies still
// gets a sane single-stack answer.
func normalize(svc Service) Service {
	svc.Held = cleanAddrs(svc.Held)
	svc.Requested = cleanAddrs(svc.Requested)
	var fams []Family
	for _, f := range svc.Families {
		if (f == IPv4 || f == IPv6) && !slices.Contains(fams, f) {
			fams = append(fams, f)
		}
	}
	for _, src := range [][]netip.Addr{svc.Requested, svc.Held} {
		for _, addr := range src {
			if len(svc.Families) == 0 && !slices.Contains(fams, FamilyOf(addr)) {
				fams = append(fams, FamilyOf(addr))
			}
		}
	}
	if len(fams) == 0 {
		fams = []Family{IPv4}
	}
	svc.Families = fams
	return svc
}

func cleanAddrs(in []netip.Addr) []netip.Addr {
	var out []netip.Addr
	for _, addr := range in {
		addr = addr.Unmap()
		if addr.IsValid() && !slices.Contains(out, addr) {
			out = append(out, addr)
		}
	}
	return out
}

func ofFamily(addrs []netip.Addr, f Family) []netip.Addr {
	var out []netip.Addr
	for _, addr := range addrs {
		if FamilyOf(addr) == f {
			out = append(out, addr)
		}
	}
	return out
}

// orderByFamilies lists addrs family by family in fams order, then any of
// a family the Service no longer asks for (Import keeps those too).
func orderByFamilies(addrs []netip.Addr, fams []Family) []netip.Addr {
	var out []netip.Addr
	for _, f := range append(slices.Clone(fams), IPv4, IPv6) {
		for _, addr := range ofFamily(addrs, f) {
			if !slices.Contains(out, addr) {
				out = append(out, addr)
			}
		}
	}
	return out
}

// adopt makes the core's record of the Service equal to svc.Held.
func (a *Allocator) adopt(svc Service) {
	st := a.svcs[svc.Key]
	if st == nil {
		st = &svcState{}
		a.svcs[svc.Key] = st
	}
	for _, addr := range st.held {
		if !slices.Contains(svc.Held, addr) {
			a.drop(svc.Key, addr)
		}
	}
	for _, addr := range svc.Held {
		if !slices.Contains(st.held, addr) {
			a.hold(svc.Key, addr)
		}
	}
	a.setShare(svc.Key, st.in.SharingKey, svc.SharingKey)
	a.setRequests(svc.Key, st.in.Requested, svc.Requested)
	st.in = svc
	st.held = slices.Clone(svc.Held)
}

func (a *Allocator) setShare(key ServiceKey, old, new string) {
	if old == new {
		return
	}
	if m := a.shares[old]; m != nil {
		delete(m, key)
		if len(m) == 0 {
			delete(a.shares, old)
		}
	}
	if new != "" {
		if a.shares[new] == nil {
			a.shares[new] = map[ServiceKey]struct{}{}
		}
		a.shares[new][key] = struct{}{}
	}
}

// setRequests moves key's entries in the request index from old to new.
func (a *Allocator) setRequests(key ServiceKey, old, new []netip.Addr) {
	for _, addr := range old {
		if slices.Contains(new, addr) {
			continue
		}
		ks := slices.DeleteFunc(a.requests[addr], func(k ServiceKey) bool { return k == key })
		if len(ks) == 0 {
			delete(a.requests, addr)
		} else {
			a.requests[addr] = ks
		}
	}
	for _, addr := range new {
		if !slices.Contains(old, addr) && !slices.Contains(a.requests[addr], key) {
			a.requests[addr] = append(a.requests[addr], key)
		}
	}
}

// requestedByOther reports whether a Service other than key asks for addr,
// an address of pool p, with a request that reserves it (reservesIn).
// Cost: O(r) matcher checks for the r Services requesting addr.
func (a *Allocator) requestedByOther(addr netip.Addr, key ServiceKey, p *pool) bool {
	return slices.ContainsFunc(a.requests[addr], func(k ServiceKey) bool {
		return k != key && a.reservesIn(k, p)
	})
}

// reservesIn reports whether the request of Service k counts against pool
// p: the request is valid and p serves k (matcher.matches; a manual-only
// pool serves a matching Service that requests its address). A request p
// could never grant it (another tenant's pool, a pool the Service did not
// name, an invalid request) reserves nothing.
func (a *Allocator) reservesIn(k ServiceKey, p *pool) bool {
	st := a.svcs[k]
	if st == nil || invalidRequest(st.in) != "" {
		return false
	}
	return newMatcher(st.in).matches(p)
}

// hold and drop update the holder index only; callers keep st.held.
func (a *Allocator) hold(key ServiceKey, addr netip.Addr) {
	hs := a.holders[addr]
	i, found := slices.BinarySearchFunc(hs, key, compareKeys)
	if found {
		return
	}
	if len(hs) == 0 {
		_ = a.used.Insert(addr)
	}
	a.holders[addr] = slices.Insert(hs, i, key)
}

func (a *Allocator) drop(key ServiceKey, addr netip.Addr) {
	hs := a.holders[addr]
	i, found := slices.BinarySearchFunc(hs, key, compareKeys)
	if !found {
		return
	}
	hs = slices.Delete(hs, i, i+1)
	if len(hs) == 0 {
		delete(a.holders, addr)
		a.used.Remove(addr)
		return
	}
	a.holders[addr] = hs
}

func compareKeys(x, y ServiceKey) int {
	if x.Namespace != y.Namespace {
		if x.Namespace < y.Namespace {
			return -1
		}
		return 1
	}
	switch {
	case x.Name < y.Name:
		return -1
	case x.Name > y.Name:
		return 1
	}
	return 0
}

// addResultAddr appends addr with its pool and, for an address the
// Service already held, the warnings it deserves.
func (a *Allocator) addResultAddr(res *Result, svc Service, addr netip.Addr, wasHeld bool) {
	res.Addrs = append(res.Addrs, addr)
	name := ""
	if p := a.owner(addr); p != nil {
		name = p.Name
	} else if cov := a.covering(addr); len(cov) > 0 {
		name = cov[0].Name
	}
	res.Pools = append(res.Pools, name)
	if !wasHeld {
		return
	}
	if name == "" {
		res.Warnings = append(res.Warnings, *heldOutsideProblem(svc, addr))
	}
	for _, other := range a.holders[addr] {
		if other == svc.Key {
			continue
		}
		if ok, _, why := compatible(svc, a.svcs[other].in); !ok {
			res.Warnings = append(res.Warnings, heldDuplicateProblem(svc, addr, other, why))
		}
	}
}
