package podipam

import (
	"errors"
	"fmt"
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"
)

// The oracle below shares no code with the allocator: it turns prefixes into
// big-integer intervals and finds free blocks by trying every aligned
// candidate in order.

type interval struct{ lo, hi *big.Int }

func ivOf(p netip.Prefix) interval {
	b := p.Addr().AsSlice()
	lo := new(big.Int).SetBytes(b)
	size := new(big.Int).Lsh(big.NewInt(1), uint(len(b)*8-p.Bits()))
	return interval{lo, new(big.Int).Sub(new(big.Int).Add(lo, size), big.NewInt(1))}
}

func (x interval) meets(y interval) bool { return x.lo.Cmp(y.hi) <= 0 && y.lo.Cmp(x.hi) <= 0 }

type oracle struct {
	pools []Pool
	held  []Block
}

// conflicting: a valid pool overlapping an older valid non-conflicting pool.
func (o *oracle) conflictsOf(name string) string {
	sorted := append([]Pool(nil), o.pools...)
	for i := range sorted { // insertion sort by (Order, Name): independent of slices.SortFunc
		for j := i; j > 0 && (sorted[j].Order < sorted[j-1].Order || sorted[j].Order == sorted[j-1].Order && sorted[j].Name < sorted[j-1].Name); j-- {
			sorted[j], sorted[j-1] = sorted[j-1], sorted[j]
		}
	}
	var ok []Pool
	for _, p := range sorted {
		if p.Validate() != nil {
			continue
		}
		loser := ""
		for _, q := range ok {
			for _, a := range append(append([]netip.Prefix(nil), p.V4.CIDRs...), p.V6.CIDRs...) {
				for _, b := range append(append([]netip.Prefix(nil), q.V4.CIDRs...), q.V6.CIDRs...) {
					if a.Addr().Is4() == b.Addr().Is4() && ivOf(a).meets(ivOf(b)) && loser == "" {
						loser = q.Name
					}
				}
			}
		}
		if p.Name == name {
			return loser
		}
		if loser == "" {
			ok = append(ok, p)
		}
	}
	return ""
}

func (o *oracle) free(c netip.Prefix) bool {
	for _, h := range o.held {
		if h.Prefix.Addr().Is4() == c.Addr().Is4() && ivOf(h.Prefix).meets(ivOf(c)) {
			return false
		}
	}
	return true
}

// allocate returns the block the allocator must cut, or "" when none.
func (o *oracle) allocate(pool string, f Family) (netip.Prefix, bool) {
	for _, p := range o.pools {
		if p.Name != pool || p.Validate() != nil || o.conflictsOf(pool) != "" {
			continue
		}
		fs := p.Spec(f)
		for _, c := range fs.CIDRs {
			n := 1 << (fs.MaskSize - c.Bits())
			step := new(big.Int).Lsh(big.NewInt(1), uint(f.Bits()-fs.MaskSize))
			for i := range n {
				start := new(big.Int).Add(ivOf(c).lo, new(big.Int).Mul(step, big.NewInt(int64(i))))
				raw := start.FillBytes(make([]byte, f.Bits()/8))
				addr, _ := netip.AddrFromSlice(raw)
				cand := netip.PrefixFrom(addr, fs.MaskSize)
				if o.free(cand) {
					return cand, true
				}
			}
		}
	}
	return netip.Prefix{}, false
}

func randomPools(r *rand.Rand) []Pool {
	v4 := []string{"10.0.0.0/24", "10.0.0.0/25", "10.0.0.128/25", "10.0.1.0/26", "10.0.0.64/26", "10.0.1.0/24"}
	v6 := []string{"fd00::/120", "fd00::80/121", "fd00::100/122", "fd00::/119"}
	var pools []Pool
	for i := range 1 + r.IntN(3) {
		p := Pool{Name: fmt.Sprintf("p%d", i), Order: int64(r.IntN(3))}
		if r.IntN(4) > 0 {
			p.V4 = FamilySpec{CIDRs: pfxs(v4[r.IntN(len(v4))]), MaskSize: 26 + r.IntN(4)}
			if r.IntN(3) == 0 {
				p.V4.CIDRs = append(p.V4.CIDRs, pfx(v4[r.IntN(len(v4))]))
			}
		}
		if r.IntN(3) > 0 {
			p.V6 = FamilySpec{CIDRs: pfxs(v6[r.IntN(len(v6))]), MaskSize: 123 + r.IntN(4)}
		}
		pools = append(pools, p)
	}
	return pools
}

// TestAllocatorAgainstOracle runs random operations — allocate, release,
// node deletion, pool changes and restarts — and checks every result
// against the oracle: the same block, errors exactly when the oracle finds
// nothing, never two overlapping blocks, and no cut before a restarted
// allocator has imported every held block.
func TestAllocatorAgainstOracle(t *testing.T) {
	cuts, refusals, restarts := 0, 0, 0
	defer func() {
		t.Logf("%d blocks cut, %d refusals, %d restarts", cuts, refusals, restarts)
		if cuts < 1000 || refusals < 100 || restarts < 100 {
			t.Errorf("the random walk exercised too little")
		}
	}()
	for seed := range uint64(60) {
		r := rand.New(rand.NewPCG(seed, 7))
		o := &oracle{pools: randomPools(r)}
		a := NewAllocator()
		a.SetPools(o.pools)
		a.MarkReady()
		for step := range 300 {
			where := fmt.Sprintf("seed %d step %d", seed, step)
			switch op := r.IntN(20); {
			case op < 10:
				pool := fmt.Sprintf("p%d", r.IntN(4))
				f := []Family{IPv4, IPv6}[r.IntN(2)]
				node := fmt.Sprintf("n%d", r.IntN(5))
				want, ok := o.allocate(pool, f)
				got, err := a.Allocate(node, pool, f)
				if ok != (err == nil) || (ok && got.Prefix != want) {
					t.Fatalf("%s: Allocate(%s,%s) = %v, %v; oracle %v %v (pools %+v)", where, pool, f, got, err, want, ok, o.pools)
				}
				if ok {
					o.held = append(o.held, got)
					cuts++
				} else {
					refusals++
				}
			case op < 14 && len(o.held) > 0:
				i := r.IntN(len(o.held))
				if _, err := a.Release(o.held[i].Prefix); err != nil {
					t.Fatalf("%s: %v", where, err)
				}
				o.held = append(o.held[:i], o.held[i+1:]...)
			case op < 15:
				node := fmt.Sprintf("n%d", r.IntN(5))
				a.ReleaseNode(node)
				kept := o.held[:0]
				for _, b := range o.held {
					if b.Node != node {
						kept = append(kept, b)
					}
				}
				o.held = kept
			case op < 17:
				o.pools = randomPools(r)
				a.SetPools(o.pools)
			default: // restart: a new allocator imports the recorded blocks in any order
				restarts++
				a = NewAllocator()
				a.SetPools(o.pools)
				perm := r.Perm(len(o.held))
				for k, i := range perm {
					if k == len(perm)/2 {
						if _, err := a.Allocate("x", "p0", IPv4); !errors.Is(err, ErrNotReady) {
							t.Fatalf("%s: cut before every block was imported: %v", where, err)
						}
					}
					if err := a.Import(o.held[i]); err != nil {
						t.Fatalf("%s: import: %v", where, err)
					}
				}
				a.MarkReady()
			}
			checkInvariants(t, where, a, o)
		}
	}
}

func checkInvariants(t *testing.T, where string, a *Allocator, o *oracle) {
	t.Helper()
	got := a.Blocks("")
	if len(got) != len(o.held) {
		t.Fatalf("%s: allocator holds %d blocks, oracle %d", where, len(got), len(o.held))
	}
	for i := range got {
		for j := range i {
			if got[i].Prefix.Addr().Is4() == got[j].Prefix.Addr().Is4() && ivOf(got[i].Prefix).meets(ivOf(got[j].Prefix)) {
				t.Fatalf("%s: %s and %s overlap", where, got[i], got[j])
			}
		}
	}
	for _, s := range a.Status() {
		if s.ConflictsWith != o.conflictsOf(s.Name) {
			t.Fatalf("%s: pool %s conflicts with %q, oracle %q", where, s.Name, s.ConflictsWith, o.conflictsOf(s.Name))
		}
	}
}
