package podipam

import (
	"net/netip"
	"slices"
	"time"
)

// BlockUse is one block a node holds and how many of its addresses are
// handed out.
type BlockUse struct {
	Prefix netip.Prefix
	Used   int
}

// Demand is the node-side decision for one (pool, family): how many
// addresses to ask the controller for, and which empty blocks to give back.
// It remembers since when each block is empty; a restarted node forgets
// that and waits a full grace period again, which only delays a release.
type Demand struct {
	// PreAllocate is how many free addresses the node keeps ready so that a
	// pod start never waits for the controller.
	PreAllocate int
	// Grace is how long a block must stay empty before it is released.
	Grace      time.Duration
	emptySince map[netip.Prefix]time.Time
}

// Plan is Demand's output.
type Plan struct {
	// Needed is how many addresses the node's blocks should hold in all;
	// the controller cuts blocks until their usable addresses reach it.
	Needed int
	// Release lists empty blocks, past their grace period, that the node
	// stops using and gives back. Their addresses are not needed.
	Release []netip.Prefix
}

// Decide computes the plan. pending counts addresses requested but not
// handed out for lack of room; keep says the pool is wanted on the node even
// without pods (the default pool, so the first pod does not wait). A pool
// with no use, nothing pending and keep false needs nothing: its blocks go
// back after the grace period. Cost: O(b log b) for b blocks.
func (d *Demand) Decide(now time.Time, blocks []BlockUse, pending int, keep bool) Plan {
	if d.emptySince == nil {
		d.emptySince = map[netip.Prefix]time.Time{}
	}
	used, capacity := 0, 0
	seen := make(map[netip.Prefix]bool, len(blocks))
	for _, b := range blocks {
		used += b.Used
		capacity += int(min(Usable(b.Prefix), 1<<30))
		seen[b.Prefix] = true
		if b.Used > 0 {
			delete(d.emptySince, b.Prefix)
		} else if _, ok := d.emptySince[b.Prefix]; !ok {
			d.emptySince[b.Prefix] = now
		}
	}
	for p := range d.emptySince {
		if !seen[p] {
			delete(d.emptySince, p)
		}
	}
	var plan Plan
	if used+pending > 0 || keep {
		plan.Needed = used + pending + d.PreAllocate
	}
	// Release the highest empty blocks first, as long as what stays covers
	// what is needed: allocation fills the lowest first, so the highest are
	// the ones most likely to stay empty.
	sorted := slices.Clone(blocks)
	slices.SortFunc(sorted, func(a, b BlockUse) int { return b.Prefix.Addr().Compare(a.Prefix.Addr()) })
	for _, b := range sorted {
		if b.Used > 0 || now.Sub(d.emptySince[b.Prefix]) < d.Grace {
			continue
		}
		size := int(min(Usable(b.Prefix), 1<<30))
		if capacity-size < plan.Needed {
			continue
		}
		capacity -= size
		plan.Release = append(plan.Release, b.Prefix)
		delete(d.emptySince, b.Prefix)
	}
	return plan
}

// Satisfy cuts blocks of pool and family for node until the usable
// addresses of the node's blocks of that pool and family reach needed. It
// returns the blocks cut; on error, the ones cut before it. A node whose
// blocks already cover needed gets nothing (one write per block change).
func (a *Allocator) Satisfy(node, pool string, f Family, needed int) ([]Block, error) {
	have := 0
	for _, b := range a.held {
		if b.Node == node && b.Pool == pool && FamilyOf(b.Prefix) == f {
			have += int(min(Usable(b.Prefix), 1<<30))
		}
	}
	var cut []Block
	for have < needed {
		b, err := a.Allocate(node, pool, f)
		if err != nil {
			return cut, err
		}
		cut = append(cut, b)
		have += int(min(Usable(b.Prefix), 1<<30))
	}
	return cut, nil
}
