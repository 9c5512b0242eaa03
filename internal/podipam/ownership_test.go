package podipam

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// Issue 19 item 10: the guards that keep one block on one node, checked
// against an oracle that shares no code with the allocator. The walk mixes
// block sizes (/24 to /30) and CIDRs that start inside a larger held block,
// imports blocks that may collide (the same prefix for another node or
// pool, a prefix inside or around a held one), and releases prefixes that
// differ from a held one only in length. Each of these mutations makes it
// fail (checked by applying each one by hand):
//   - Import accepting the same prefix for another node or pool;
//   - overlapping skipping the held block that starts before the prefix;
//   - Release matching a block by its address only, ignoring the length.

// ownOracle is the set of held blocks as a plain list.
type ownOracle struct{ held []Block }

func (o *ownOracle) overlapping(p netip.Prefix) []Block {
	var out []Block
	for _, h := range o.held {
		if FamilyOf(h.Prefix) == FamilyOf(p) && ivOf(h.Prefix).meets(ivOf(p)) {
			out = append(out, h)
		}
	}
	return out
}

// importResult: nil when b may be imported (nothing overlaps, or exactly b
// is held already), else the error class the allocator must return.
func (o *ownOracle) importResult(b Block) error {
	hits := o.overlapping(b.Prefix)
	if len(hits) == 0 || len(hits) == 1 && hits[0] == b {
		return nil
	}
	return ErrOverlap
}

func (o *ownOracle) release(p netip.Prefix) (Block, bool) {
	for i, h := range o.held {
		if h.Prefix == p {
			o.held = slices.Delete(o.held, i, i+1)
			return h, true
		}
	}
	return Block{}, false
}

// ownPools draws pools whose CIDRs may start inside blocks cut with a
// larger mask by an earlier pool set.
func ownPools(r *rand.Rand) []Pool {
	v4 := []string{"10.0.0.0/24", "10.0.0.32/27", "10.0.0.96/27", "10.0.0.128/25", "10.0.0.200/29", "10.0.1.0/26", "10.0.0.0/22"}
	v6 := []string{"fd00::/120", "fd00::20/123", "fd00::80/121", "fd00::/118"}
	var pools []Pool
	for i := range 1 + r.IntN(3) {
		p := Pool{Name: fmt.Sprintf("p%d", i), Order: int64(r.IntN(3))}
		c := pfx(v4[r.IntN(len(v4))])
		p.V4 = FamilySpec{CIDRs: []netip.Prefix{c}, MaskSize: max(c.Bits(), 24+r.IntN(7))}
		if r.IntN(2) == 0 {
			c6 := pfx(v6[r.IntN(len(v6))])
			p.V6 = FamilySpec{CIDRs: []netip.Prefix{c6}, MaskSize: max(c6.Bits(), 120+r.IntN(7))}
		}
		pools = append(pools, p)
	}
	return pools
}

// nearPrefix returns a prefix near the held ones: a held prefix itself, a
// prefix at its address with another length, or one inside or around it.
func nearPrefix(r *rand.Rand, held []Block) netip.Prefix {
	if len(held) == 0 || r.IntN(5) == 0 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(256))}), 24+r.IntN(9)).Masked()
	}
	h := held[r.IntN(len(held))].Prefix
	bits := min(max(h.Bits()+r.IntN(7)-3, h.Bits()-6), h.Addr().BitLen())
	addr := h.Addr()
	for range r.IntN(3) * 8 {
		addr = addr.Next()
	}
	return netip.PrefixFrom(addr, bits).Masked()
}

func TestBlockOwnershipOracle(t *testing.T) {
	var stats struct{ cuts, imports, importRefused, releases, releaseRefused int }
	defer func() {
		t.Logf("%+v", stats)
		if stats.cuts < 500 || stats.importRefused < 200 || stats.imports < 100 || stats.releaseRefused < 200 || stats.releases < 200 {
			t.Errorf("the walk exercised too little: %+v", stats)
		}
	}()
	for seed := range uint64(40) {
		r := rand.New(rand.NewPCG(seed, 19))
		pools := ownPools(r)
		o := &ownOracle{}
		a := NewAllocator()
		a.SetPools(pools)
		a.MarkReady()
		po := &oracle{pools: pools}
		for step := range 300 {
			where := fmt.Sprintf("seed %d step %d", seed, step)
			node := fmt.Sprintf("n%d", r.IntN(3))
			switch op := r.IntN(10); {
			case op < 4: // allocate: the oracle of property_test.go picks the block
				pool, f := fmt.Sprintf("p%d", r.IntN(3)), []Family{IPv4, IPv6}[r.IntN(2)]
				po.held = o.held
				want, ok := po.allocate(pool, f)
				got, err := a.Allocate(node, pool, f)
				if ok != (err == nil) || ok && got.Prefix != want {
					t.Fatalf("%s: Allocate(%s, %s) = %v, %v; oracle %v %v", where, pool, f, got, err, want, ok)
				}
				if ok {
					o.held = append(o.held, got)
					stats.cuts++
				}
			case op < 7: // import a block that may collide
				b := Block{Prefix: nearPrefix(r, o.held), Pool: fmt.Sprintf("p%d", r.IntN(2)), Node: node}
				if r.IntN(3) == 0 && len(o.held) > 0 {
					b = o.held[r.IntN(len(o.held))]
					b.Node = fmt.Sprintf("n%d", r.IntN(3)) // the same prefix, maybe for another node
				}
				want := o.importResult(b)
				err := a.Import(b)
				if !errors.Is(err, want) || (want == nil) != (err == nil) {
					t.Fatalf("%s: Import(%s) = %v, oracle %v (held %v)", where, b, err, want, o.held)
				}
				if err != nil {
					stats.importRefused++
				} else if !slices.Contains(o.held, b) {
					o.held = append(o.held, b)
					stats.imports++
				}
			case op < 9: // release a prefix that may differ from a held one in length only
				p := nearPrefix(r, o.held)
				want, ok := o.release(p)
				got, err := a.Release(p)
				if ok != (err == nil) || ok && got != want || !ok && !errors.Is(err, ErrNotHeld) {
					t.Fatalf("%s: Release(%s) = %v, %v; oracle %v %v", where, p, got, err, want, ok)
				}
				if ok {
					stats.releases++
				} else {
					stats.releaseRefused++
				}
			default:
				pools = ownPools(r)
				po.pools = pools
				a.SetPools(pools)
			}
			checkSameBlocks(t, where, a, o)
		}
	}
}

// checkSameBlocks: the allocator holds exactly the oracle's blocks, and
// Held finds each one and nothing at another length.
func checkSameBlocks(t *testing.T, where string, a *Allocator, o *ownOracle) {
	t.Helper()
	want := slices.Clone(o.held)
	slices.SortFunc(want, func(x, y Block) int { return x.Prefix.Addr().Compare(y.Prefix.Addr()) })
	if got := a.Blocks(""); !slices.Equal(got, want) {
		t.Fatalf("%s: allocator holds %v, oracle %v", where, got, want)
	}
	for _, b := range want {
		if got, ok := a.Held(b.Prefix); !ok || got != b {
			t.Fatalf("%s: Held(%s) = %v %v, want %v", where, b.Prefix, got, ok, b)
		}
		if b.Prefix.Bits() > 0 {
			wider := netip.PrefixFrom(b.Prefix.Addr(), b.Prefix.Bits()-1).Masked()
			if _, ok := a.Held(wider); ok && !slices.ContainsFunc(want, func(x Block) bool { return x.Prefix == wider }) {
				t.Fatalf("%s: Held(%s) found a block that is not held", where, wider)
			}
		}
	}
}

// The three guards, one example each (the walk above finds them too).
func TestOneBlockOneNode(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{{Name: "p", V4: FamilySpec{CIDRs: pfxs("10.0.0.32/27"), MaskSize: 28}}})
	a.MarkReady()
	big := Block{Prefix: pfx("10.0.0.0/26"), Pool: "old", Node: "a"}
	if err := a.Import(big); err != nil {
		t.Fatal(err)
	}
	if err := a.Import(Block{Prefix: big.Prefix, Pool: "old", Node: "b"}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("the same prefix for another node: %v, want ErrOverlap", err)
	}
	if err := a.Import(Block{Prefix: big.Prefix, Pool: "p", Node: "a"}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("the same prefix for another pool: %v, want ErrOverlap", err)
	}
	// 10.0.0.32/27 starts inside the held /26: nothing may be cut from it.
	if b, err := a.Allocate("b", "p", IPv4); !errors.Is(err, ErrExhausted) {
		t.Fatalf("cut %v (%v) inside %s", b, err, big)
	}
	if err := a.Import(Block{Prefix: pfx("10.0.0.48/28"), Pool: "p", Node: "b"}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("import inside a held block: %v, want ErrOverlap", err)
	}
	if _, err := a.Release(pfx("10.0.0.0/27")); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("release of 10.0.0.0/27 while 10.0.0.0/26 is held: %v, want ErrNotHeld", err)
	}
	if got := a.Blocks(""); len(got) != 1 || got[0] != big {
		t.Fatalf("held %v, want only %v", got, big)
	}
}
