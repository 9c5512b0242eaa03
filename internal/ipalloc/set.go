package ipalloc

import (
	"math/big"
	"net/netip"
	"slices"
	"sort"
)

// Set is a sorted set of used addresses (both families; IPv4 sorts first).
// Its memory is 24 bytes per member whatever the ranges searched against it.
// The zero value is an empty set ready to use.
type Set struct{ addrs []netip.Addr }

// Len returns the number of members. Cost: O(1).
func (s *Set) Len() int { return len(s.addrs) }

// Contains reports membership. Cost: O(log n).
func (s *Set) Contains(a netip.Addr) bool {
	_, ok := slices.BinarySearchFunc(s.addrs, a, netip.Addr.Compare)
	return ok
}

// Insert adds a, or returns ErrInUse. Cost: O(log n) plus a copy of the
// members above a (none when addresses are taken lowest first).
func (s *Set) Insert(a netip.Addr) error {
	i, ok := slices.BinarySearchFunc(s.addrs, a, netip.Addr.Compare)
	if ok {
		return ErrInUse
	}
	s.addrs = slices.Insert(s.addrs, i, a)
	return nil
}

// Remove deletes a and reports whether it was a member. Cost: O(log n)
// plus a copy of the members above a.
func (s *Set) Remove(a netip.Addr) bool {
	i, ok := slices.BinarySearchFunc(s.addrs, a, netip.Addr.Compare)
	if ok {
		s.addrs = slices.Delete(s.addrs, i, i+1)
	}
	return ok
}

// All returns the members in order; the caller must not modify it.
func (s *Set) All() []netip.Addr { return s.addrs }

// bounds returns the index range of members inside r.
func (s *Set) bounds(r Range) (int, int) {
	lo, _ := slices.BinarySearchFunc(s.addrs, r.First, netip.Addr.Compare)
	hi, found := slices.BinarySearchFunc(s.addrs, r.Last, netip.Addr.Compare)
	if found {
		hi++
	}
	return lo, hi
}

// In returns the members that lie in r, sorted; the slice aliases the set
// and is valid until the next Insert or Remove. Cost: O(log n).
func (s *Set) In(r Range) []netip.Addr {
	lo, hi := s.bounds(r)
	return s.addrs[lo:hi:hi]
}

// CountIn returns how many members lie in r. Cost: O(log n).
func (s *Set) CountIn(r Range) int {
	lo, hi := s.bounds(r)
	return hi - lo
}

// FirstFree returns the lowest address of r that is not a member, or
// ErrFull. Cost: O(log n) whatever the size of r: members form a run of
// consecutive addresses from r.First exactly as long as member k sits at
// r.First+k, a monotone predicate we can binary-search.
func (s *Set) FirstFree(r Range) (netip.Addr, error) {
	lo, hi := s.bounds(r)
	if lo == hi || s.addrs[lo] != r.First {
		return r.First, nil
	}
	run := sort.Search(hi-lo, func(k int) bool {
		d := distance(r.First, s.addrs[lo+k])
		return d.hi != 0 || d.lo != uint64(k)
	})
	// run members occupy r.First .. r.First+run-1; run <= size of r.
	span := distance(r.First, r.Last)
	if span.hi == 0 && span.lo < uint64(run) {
		return netip.Addr{}, ErrFull
	}
	return add(r.First, uint64(run)), nil
}

// FreeIn returns the number of addresses of r that are not members.
// Cost: O(log n), one big.Int allocation.
func (s *Set) FreeIn(r Range) *big.Int {
	n := r.Size()
	return n.Sub(n, big.NewInt(int64(s.CountIn(r))))
}

// Allocator hands out addresses from an ordered list of ranges, lowest
// first within each range and ranges in the order given: the Cilium
// pkg/ipalloc shape, for callers that own their address space alone.
type Allocator struct {
	ranges []Range
	used   Set
}

// NewAllocator validates the ranges (kept in order) and returns an empty
// allocator. Cost: O(len(ranges)).
func NewAllocator(ranges ...Range) (*Allocator, error) {
	for _, r := range ranges {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	return &Allocator{ranges: slices.Clone(ranges)}, nil
}

// Alloc takes a specific address: ErrOutOfRange or ErrInUse on failure.
// Cost: O(len(ranges) + log n).
func (a *Allocator) Alloc(addr netip.Addr) error {
	if !a.inRange(addr) {
		return ErrOutOfRange
	}
	return a.used.Insert(addr)
}

// AllocFirst takes the first free address, or returns ErrFull.
// Cost: O(len(ranges) * log n).
func (a *Allocator) AllocFirst() (netip.Addr, error) {
	for _, r := range a.ranges {
		if addr, err := a.used.FirstFree(r); err == nil {
			return addr, a.used.Insert(addr)
		}
	}
	return netip.Addr{}, ErrFull
}

// Free releases addr: ErrOutOfRange if it was never in a range; freeing an
// unused address is a no-op. Cost: O(len(ranges) + log n).
func (a *Allocator) Free(addr netip.Addr) error {
	if !a.inRange(addr) {
		return ErrOutOfRange
	}
	a.used.Remove(addr)
	return nil
}

// Has reports whether addr is taken. Cost: O(log n).
func (a *Allocator) Has(addr netip.Addr) bool { return a.used.Contains(addr) }

// Used returns the number of taken addresses. Cost: O(1).
func (a *Allocator) Used() int { return a.used.Len() }

// Free count over every range. Cost: O(len(ranges) * log n).
func (a *Allocator) FreeCount() *big.Int {
	n := new(big.Int)
	for _, r := range a.ranges {
		n.Add(n, a.used.FreeIn(r))
	}
	return n
}

func (a *Allocator) inRange(addr netip.Addr) bool {
	for _, r := range a.ranges {
		if r.Contains(addr) {
			return true
		}
	}
	return false
}
