package ipalloc

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"net/netip"
	"slices"
)

// Sentinel errors; callers test them with errors.Is.
var (
	// ErrFull: no free address is left in the range(s) searched.
	ErrFull = errors.New("ipalloc: no free address left")
	// ErrInUse: the address is already taken.
	ErrInUse = errors.New("ipalloc: address already in use")
	// ErrOutOfRange: the address lies outside every range of the allocator.
	ErrOutOfRange = errors.New("ipalloc: address outside the allocator's ranges")
	// ErrInvalidRange: a range mixes families, has an invalid bound or
	// starts after it stops.
	ErrInvalidRange = errors.New("ipalloc: invalid range")
)

// Range is an inclusive range of addresses of one family.
type Range struct{ First, Last netip.Addr }

// Validate reports ErrInvalidRange (wrapped, naming the problem) when r
// cannot be used. Cost: O(1).
func (r Range) Validate() error {
	switch {
	case !r.First.IsValid() || !r.Last.IsValid():
		return fmt.Errorf("%w: missing bound", ErrInvalidRange)
	case r.First.Zone() != "" || r.Last.Zone() != "":
		return fmt.Errorf("%w: %s-%s carries an IPv6 zone", ErrInvalidRange, r.First, r.Last)
	case r.First.Is4() != r.Last.Is4() || r.First.Is4In6() || r.Last.Is4In6():
		return fmt.Errorf("%w: %s-%s mixes IPv4 and IPv6", ErrInvalidRange, r.First, r.Last)
	case r.Last.Less(r.First):
		return fmt.Errorf("%w: start %s is after stop %s", ErrInvalidRange, r.First, r.Last)
	}
	return nil
}

func (r Range) String() string {
	if r.First == r.Last {
		return r.First.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// Contains reports whether a lies in r. Cost: O(1).
func (r Range) Contains(a netip.Addr) bool {
	return a.IsValid() && a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Overlaps reports whether r and o share an address. Cost: O(1).
func (r Range) Overlaps(o Range) bool {
	return r.First.Is4() == o.First.Is4() && r.First.Compare(o.Last) <= 0 && o.First.Compare(r.Last) <= 0
}

// Size is the number of addresses in r (2^128 fits: it is a big.Int).
// Cost: O(1), one allocation.
func (r Range) Size() *big.Int {
	d := distance(r.First, r.Last)
	n := new(big.Int).SetUint64(d.hi)
	n.Lsh(n, 64)
	n.Add(n, new(big.Int).SetUint64(d.lo))
	return n.Add(n, big.NewInt(1))
}

// PrefixRange returns the range a prefix covers. Cost: O(1).
func PrefixRange(p netip.Prefix) Range {
	return Range{First: p.Masked().Addr(), Last: LastAddr(p)}
}

// LastAddr is the highest address of p (the IPv4 broadcast address), p
// masked or not: the one "last address of a prefix" of the repository.
// Cost: O(1).
func LastAddr(p netip.Prefix) netip.Addr {
	first := p.Masked().Addr()
	b := first.As16()
	hostBits := first.BitLen() - p.Bits()
	for i := 0; i < hostBits; i++ {
		b[15-i/8] |= 1 << (i % 8)
	}
	last := netip.AddrFrom16(b)
	if first.Is4() {
		last = last.Unmap()
	}
	return last
}

// Normalize sorts rs and merges overlapping or adjacent ranges, returning a
// new slice. Cost: O(n log n).
func Normalize(rs []Range) []Range {
	out := slices.Clone(rs)
	slices.SortFunc(out, func(a, b Range) int { return a.First.Compare(b.First) })
	merged := out[:0]
	for _, r := range out {
		if n := len(merged); n > 0 && merged[n-1].First.Is4() == r.First.Is4() {
			last := &merged[n-1]
			next := last.Last.Next()
			if r.First.Compare(last.Last) <= 0 || (next.IsValid() && next == r.First) {
				if last.Last.Less(r.Last) {
					last.Last = r.Last
				}
				continue
			}
		}
		merged = append(merged, r)
	}
	return merged
}

// Subtract returns the parts of r not covered by minus, lowest first.
// minus must be normalized (see Normalize). Cost: O(len(minus)).
func Subtract(r Range, minus []Range) []Range {
	var out []Range
	cur := r
	for _, m := range minus {
		if !cur.Overlaps(m) {
			continue
		}
		if cur.First.Less(m.First) {
			out = append(out, Range{cur.First, m.First.Prev()})
		}
		if !m.Last.Less(cur.Last) {
			return out
		}
		cur.First = m.Last.Next()
	}
	return append(out, cur)
}

// u128 is an address as a 128-bit integer; IPv4 addresses use their
// IPv4-mapped form, so differences within one family are exact.
type u128 struct{ hi, lo uint64 }

func toU128(a netip.Addr) u128 {
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

// distance returns b-a; callers guarantee a <= b and one family.
func distance(a, b netip.Addr) u128 {
	x, y := toU128(a), toU128(b)
	lo := y.lo - x.lo
	hi := y.hi - x.hi
	if y.lo < x.lo {
		hi--
	}
	return u128{hi, lo}
}

// add returns a+n, which callers keep within a's family.
func add(a netip.Addr, n uint64) netip.Addr {
	x := toU128(a)
	lo := x.lo + n
	hi := x.hi
	if lo < x.lo {
		hi++
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo)
	out := netip.AddrFrom16(b)
	if a.Is4() {
		out = out.Unmap()
	}
	return out
}
