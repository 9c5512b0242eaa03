package announce

import (
	"iter"
	"math/bits"
)

// nodeSet is a set of node indices (into the sorted node names of one
// decision). Bitsets keep the per-Service work at a few words for clusters
// of hundreds of nodes, where maps cost a recompute ~100x more.
type nodeSet []uint64

func newNodeSet(n int) nodeSet { return make(nodeSet, (n+63)/64) }

func (s nodeSet) add(i int)      { s[i/64] |= 1 << (i % 64) }
func (s nodeSet) has(i int) bool { return i >= 0 && s[i/64]&(1<<(i%64)) != 0 }
func (s nodeSet) or(o nodeSet) {
	for i := range s {
		s[i] |= o[i]
	}
}
func (s nodeSet) and(o nodeSet) {
	for i := range s {
		s[i] &= o[i]
	}
}

func (s nodeSet) count() int {
	n := 0
	for _, w := range s {
		n += bits.OnesCount64(w)
	}
	return n
}

// each calls fn for every member, in increasing order.
func (s nodeSet) each(fn func(i int)) {
	for wi, w := range s {
		for w != 0 {
			b := bits.TrailingZeros64(w)
			fn(wi*64 + b)
			w &^= 1 << b
		}
	}
}

func (s nodeSet) intersects(o nodeSet) bool {
	for i := range s {
		if s[i]&o[i] != 0 {
			return true
		}
	}
	return false
}

func (s nodeSet) andCount(o nodeSet) int {
	n := 0
	for i := range s {
		n += bits.OnesCount64(s[i] & o[i])
	}
	return n
}

// andEach yields the members of s ∩ o in increasing order.
func (s nodeSet) andEach(o nodeSet) iter.Seq[int] {
	return func(yield func(int) bool) {
		for wi := range s {
			w := s[wi] & o[wi]
			for w != 0 {
				b := bits.TrailingZeros64(w)
				if !yield(wi*64 + b) {
					return
				}
				w &^= 1 << b
			}
		}
	}
}
