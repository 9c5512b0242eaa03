package podipam

import (
	"net/netip"
	"slices"
)

// FamilyStatus counts one family of a pool.
type FamilyStatus struct {
	// Blocks is how many blocks nodes hold; Capacity how many /MaskSize
	// blocks the pool's CIDRs hold in all (capped at 1<<62).
	Blocks, Capacity uint64
	// Addresses is how many pod addresses the held blocks hold.
	Addresses uint64
}

// PoolStatus is what the controller writes into a pool's status.
type PoolStatus struct {
	Name string
	// Invalid and ConflictsWith say why no block is cut from the pool.
	Invalid       error
	ConflictsWith string
	V4, V6        FamilyStatus
	// Draining lists held blocks outside the pool's current CIDRs: a CIDR
	// removed from the spec stays reserved until these nodes release them.
	Draining []Block
	// Nodes is how many nodes hold a block of the pool.
	Nodes int
}

// Status reports on every known pool plus pools that only held blocks
// still name (deleted pools), sorted by name. Cost: O(n + p·c).
func (a *Allocator) Status() []PoolStatus {
	byName := map[string]*PoolStatus{}
	get := func(name string) *PoolStatus {
		s, ok := byName[name]
		if !ok {
			s = &PoolStatus{Name: name}
			byName[name] = s
		}
		return s
	}
	for name, ps := range a.pools {
		s := get(name)
		s.Invalid, s.ConflictsWith = ps.invalid, ps.conflictsOf
		for _, f := range []Family{IPv4, IPv6} {
			fs := ps.Spec(f)
			fst := s.family(f)
			for _, c := range fs.CIDRs {
				if c.IsValid() && fs.MaskSize >= c.Bits() && fs.MaskSize <= f.Bits() {
					fst.Capacity = satAdd(fst.Capacity, BlockSize(f, c.Bits()+(f.Bits()-fs.MaskSize)))
				}
			}
		}
	}
	nodes := map[string]map[string]bool{}
	for _, b := range a.held {
		s := get(b.Pool)
		f := FamilyOf(b.Prefix)
		fst := s.family(f)
		fst.Blocks++
		fst.Addresses = satAdd(fst.Addresses, Usable(b.Prefix))
		if nodes[b.Pool] == nil {
			nodes[b.Pool] = map[string]bool{}
		}
		nodes[b.Pool][b.Node] = true
		if !a.inPool(b) {
			s.Draining = append(s.Draining, b)
		}
	}
	out := make([]PoolStatus, 0, len(byName))
	for name, s := range byName {
		s.Nodes = len(nodes[name])
		out = append(out, *s)
	}
	slices.SortFunc(out, func(x, y PoolStatus) int {
		if x.Name < y.Name {
			return -1
		}
		if x.Name > y.Name {
			return 1
		}
		return 0
	})
	return out
}

func (s *PoolStatus) family(f Family) *FamilyStatus {
	if f == IPv6 {
		return &s.V6
	}
	return &s.V4
}

// inPool reports whether b lies inside one of its pool's current CIDRs.
func (a *Allocator) inPool(b Block) bool {
	ps, ok := a.pools[b.Pool]
	if !ok {
		return false
	}
	return slices.ContainsFunc(ps.Spec(FamilyOf(b.Prefix)).CIDRs, func(c netip.Prefix) bool { return contains(c, b.Prefix) })
}

func satAdd(a, b uint64) uint64 {
	if a+b < a || a+b > 1<<62 {
		return 1 << 62
	}
	return a + b
}
