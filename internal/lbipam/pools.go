package lbipam

import (
	"cmp"
	"fmt"
	"math/big"
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// pool is a Pool compiled for allocation. Every address belongs to the
// effective ranges of at most one pool (the oldest whose blocks cover it),
// so usage is never counted twice and two pools never hand out one address.
type pool struct {
	Pool
	valid     []ipalloc.Range // blocks that passed validation, block order
	usable    []ipalloc.Range // valid minus first/last where excluded
	eff       []ipalloc.Range // usable minus older pools' blocks, block order
	conflicts []string
	invalid   []string
	// badFamily maps a family to the messages of this pool's invalid blocks
	// of that family, so a "no IPv6 address" reason can name the broken
	// block instead of asking for a new one.
	badFamily map[Family][]string
	ignored   bool // duplicate name: the whole pool is set aside
}

// markInvalid records msg as an invalid block of the family of addr (none
// when addr is not valid).
func (p *pool) markInvalid(addr netip.Addr, msg string) {
	p.invalid = append(p.invalid, msg)
	if !addr.IsValid() {
		return
	}
	if p.badFamily == nil {
		p.badFamily = map[Family][]string{}
	}
	f := FamilyOf(addr)
	p.badFamily[f] = append(p.badFamily[f], msg)
}

// usableRange applies the first/last rule: a CIDR block loses its network
// and broadcast addresses unless the pool allows them or the prefix is a
// point-to-point one (/31, /127) or a single host.
func usableRange(b Block, allowFirstLast bool) ipalloc.Range {
	r := ipalloc.Range{First: b.First, Last: b.Last}
	if !b.FromCIDR || allowFirstLast || b.Bits >= b.First.BitLen()-1 {
		return r
	}
	return ipalloc.Range{First: r.First.Next(), Last: r.Last.Prev()}
}

// validateBlock returns why b is malformed, or "". Messages name the block
// as the API does (spec.blocks[i], 0-based).
func validateBlock(b Block) string {
	r := ipalloc.Range{First: b.First, Last: b.Last}
	if msg := RangeProblem(b.First, b.Last); msg != "" {
		return fmt.Sprintf("spec.blocks[%d]: %s", b.Index, msg)
	}
	if b.FromCIDR {
		p, err := b.First.Prefix(b.Bits)
		if err != nil || p.Addr() != b.First || ipalloc.PrefixRange(p) != r {
			return fmt.Sprintf("spec.blocks[%d]: %s-%s is not the CIDR /%d it claims to be: write the network address, e.g. %s", b.Index, b.First, b.Last, b.Bits, p)
		}
	}
	return ""
}

// RangeProblem says, in the API's terms, why first-last is not a usable
// range, or "".
func RangeProblem(first, last netip.Addr) string {
	switch {
	case !first.IsValid() || !last.IsValid():
		return "start or stop is missing: set both"
	case first.Zone() != "" || last.Zone() != "":
		return fmt.Sprintf("%s-%s carries an IPv6 zone: remove the %%zone", first, last)
	case first.Is4() != last.Is4() || first.Is4In6() || last.Is4In6():
		return fmt.Sprintf("start %s and stop %s are of different IP families: use one block per family", first, last)
	case last.Less(first):
		return fmt.Sprintf("start %s is after stop %s: swap them", first, last)
	}
	return ""
}

// compilePool validates the blocks of one pool: malformed blocks, blocks
// holding addresses that can never be a Service's (unusableProblem) and
// later blocks overlapping earlier ones of the same pool (admission cannot
// see that) are invalid and hand out nothing.
func compilePool(p Pool) *pool {
	c := &pool{Pool: p}
	for _, b := range p.Blocks {
		msg := validateBlock(b)
		if msg == "" {
			msg = unusableProblem(b)
		}
		if msg != "" {
			c.markInvalid(blockAddr(b), msg)
			continue
		}
		r := ipalloc.Range{First: b.First, Last: b.Last}
		if j := slices.IndexFunc(c.valid, r.Overlaps); j >= 0 {
			c.markInvalid(b.First, fmt.Sprintf("spec.blocks[%d] (%s) overlaps %s, another block of the same pool: remove or shrink one of them", b.Index, r, c.valid[j]))
			continue
		}
		c.valid = append(c.valid, r)
		c.usable = append(c.usable, usableRange(b, p.AllowFirstLastIPs))
	}
	return c
}

// blockAddr is an address saying the family of a block that failed
// validation, or the zero Addr when its two ends disagree on one.
func blockAddr(b Block) netip.Addr {
	switch {
	case b.First.IsValid() && b.Last.IsValid() && FamilyOf(b.First) != FamilyOf(b.Last):
		return netip.Addr{}
	case b.First.IsValid():
		return b.First
	}
	return b.Last
}

func olderFirst(a, b *pool) int {
	if c := a.Created.Compare(b.Created); c != 0 {
		return c
	}
	return cmp.Compare(a.Name, b.Name)
}

// allocationOrder: pools with a Priority first, lower number first; then
// Created asc, then Name.
func allocationOrder(a, b *pool) int {
	switch {
	case a.Priority != nil && b.Priority == nil:
		return -1
	case a.Priority == nil && b.Priority != nil:
		return 1
	case a.Priority != nil && *a.Priority != *b.Priority:
		return cmp.Compare(*a.Priority, *b.Priority)
	}
	return olderFirst(a, b)
}

// compilePools validates every pool and resolves overlaps: the older pool
// keeps the overlap, the newer one names it in ConflictsWith and hands out
// nothing from it. Cost: O(P^2 * B) for P pools of B blocks.
func compilePools(in []Pool) []*pool {
	ps := make([]*pool, 0, len(in))
	for _, p := range in {
		ps = append(ps, compilePool(p))
	}
	slices.SortStableFunc(ps, olderFirst)
	seen := map[string]bool{}
	var claimed []ipalloc.Range // union of older pools' valid blocks
	for _, p := range ps {
		if seen[p.Name] {
			p.ignored = true
			p.invalid = append(p.invalid, fmt.Sprintf("another pool is also named %q: this copy is ignored, rename it", p.Name))
			continue
		}
		seen[p.Name] = true
		for _, o := range ps {
			if o == p {
				break
			}
			if !o.ignored && rangesOverlap(o.valid, p.valid) {
				p.conflicts = append(p.conflicts, o.Name)
			}
		}
		for _, u := range p.usable {
			p.eff = append(p.eff, ipalloc.Subtract(u, claimed)...)
		}
		claimed = ipalloc.Normalize(append(claimed, p.valid...))
	}
	slices.SortStableFunc(ps, allocationOrder)
	return ps
}

func rangesOverlap(a, b []ipalloc.Range) bool {
	for _, x := range a {
		for _, y := range b {
			if x.Overlaps(y) {
				return true
			}
		}
	}
	return false
}

func hasFamily(rs []ipalloc.Range, f Family) bool {
	return slices.ContainsFunc(rs, func(r ipalloc.Range) bool { return FamilyOf(r.First) == f })
}

func rangesContain(rs []ipalloc.Range, a netip.Addr) bool {
	return slices.ContainsFunc(rs, func(r ipalloc.Range) bool { return r.Contains(a) })
}

// usage counts the pool's effective addresses of family f against used.
func (p *pool) usage(used *ipalloc.Set, f Family) Usage {
	u := Usage{Total: new(big.Int), Used: new(big.Int), Free: new(big.Int)}
	for _, r := range p.eff {
		if FamilyOf(r.First) != f {
			continue
		}
		u.Total.Add(u.Total, r.Size())
		u.Used.Add(u.Used, big.NewInt(int64(used.CountIn(r))))
		if p.AvoidBuggyIPs {
			// .0 and .255 are not handed out, nor counted (unless held).
			u.Total.Sub(u.Total, buggyCount(r))
			for _, a := range used.In(r) {
				if buggyIP(a) {
					u.Used.Sub(u.Used, big.NewInt(1))
				}
			}
		}
	}
	u.Free.Sub(u.Total, u.Used)
	return u
}

func (p *pool) report(used *ipalloc.Set) PoolReport {
	return PoolReport{
		Name:          p.Name,
		ConflictsWith: slices.Clone(p.conflicts),
		Invalid:       slices.Clone(p.invalid),
		IPv4:          p.usage(used, IPv4),
		IPv6:          p.usage(used, IPv6),
	}
}

// SetPools replaces the pool set and returns the report of every pool,
// sorted by name. Held addresses are never dropped: a Service whose address
// left every pool keeps it (Assign then warns HeldOutsidePools).
func (a *Allocator) SetPools(pools []Pool) []PoolReport {
	a.pools = compilePools(pools)
	return a.Reports()
}

// Reports returns each pool's conflicts, invalid blocks and usage per
// family, sorted by name. Cost: O(P * B * log n).
func (a *Allocator) Reports() []PoolReport {
	out := make([]PoolReport, 0, len(a.pools))
	for _, p := range a.pools {
		out = append(out, p.report(&a.used))
	}
	slices.SortStableFunc(out, func(x, y PoolReport) int { return cmp.Compare(x.Name, y.Name) })
	return out
}

// owner returns the pool whose effective ranges hold addr, or nil.
func (a *Allocator) owner(addr netip.Addr) *pool {
	for _, p := range a.pools {
		if !p.ignored && rangesContain(p.eff, addr) {
			return p
		}
	}
	return nil
}

// covering returns the pools whose valid blocks contain addr.
func (a *Allocator) covering(addr netip.Addr) []*pool {
	var out []*pool
	for _, p := range a.pools {
		if !p.ignored && rangesContain(p.valid, addr) {
			out = append(out, p)
		}
	}
	return out
}
