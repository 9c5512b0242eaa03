package podipam

import (
	"fmt"
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// Block is a CIDR handed to one node from one pool.
type Block struct {
	Prefix netip.Prefix
	Pool   string
	Node   string
}

func (b Block) String() string { return fmt.Sprintf("%s (pool %q, node %q)", b.Prefix, b.Pool, b.Node) }

// Allocator holds pools and every block handed out. It is not safe for
// concurrent use; the adapter serialises calls.
//
// Restart safety: a new Allocator refuses to cut (ErrNotReady) until
// MarkReady, which the adapter calls only after Import-ing every block
// recorded in the cluster. A block is held by one node only: Import and
// Allocate never let two held blocks overlap.
type Allocator struct {
	pools map[string]*poolState
	held  []Block // sorted by Prefix.Addr(); never overlapping
	ready bool
}

// NewAllocator returns an allocator with no pools, not ready.
func NewAllocator() *Allocator { return &Allocator{pools: map[string]*poolState{}} }

// SetPools replaces every pool. Held blocks stay held whatever the new
// pools say: a block outside its pool's CIDRs is "draining" (see Status)
// until its node releases it. Cost: see resolve.
func (a *Allocator) SetPools(pools []Pool) { a.pools = resolve(pools) }

// MarkReady allows cutting. Call it once every held block was imported.
func (a *Allocator) MarkReady() { a.ready = true }

// Ready reports whether MarkReady was called.
func (a *Allocator) Ready() bool { return a.ready }

// Import records a block that is already held (read back from the cluster).
// It fails with ErrOverlap when the block overlaps a held one: the caller
// imports in a stable order (oldest record first) and reports the loser.
// Importing the exact same block for the same node and pool again is a
// no-op. Cost: O(log n) plus an insertion copy.
func (a *Allocator) Import(b Block) error {
	if !b.Prefix.IsValid() || b.Prefix.Masked() != b.Prefix {
		return fmt.Errorf("import %s: %w: not a network address", b, ErrInvalidPool)
	}
	i, hit := a.overlapping(b.Prefix)
	if hit >= 0 {
		if a.held[hit] == b {
			return nil
		}
		return fmt.Errorf("import %s: %w %s", b, ErrOverlap, a.held[hit])
	}
	a.held = slices.Insert(a.held, i, b)
	return nil
}

// Allocate cuts the lowest free block of the pool's family for node.
// Cost: O(k log n) where k is the number of held blocks skipped.
func (a *Allocator) Allocate(node, pool string, f Family) (Block, error) {
	if !a.ready {
		return Block{}, ErrNotReady
	}
	ps, ok := a.pools[pool]
	if !ok {
		return Block{}, fmt.Errorf("pool %q: %w: create it or point the namespace at another pool", pool, ErrUnknownPool)
	}
	if err := ps.usable(); err != nil {
		return Block{}, err
	}
	fs := ps.Spec(f)
	if len(fs.CIDRs) == 0 {
		return Block{}, fmt.Errorf("pool %q: %w %s: add spec.ipv%d.cidrs", pool, ErrNoFamily, f, f)
	}
	for _, c := range fs.CIDRs {
		if p, ok := a.firstFree(c, fs.MaskSize); ok {
			b := Block{Prefix: p, Pool: pool, Node: node}
			i, _ := a.overlapping(p)
			a.held = slices.Insert(a.held, i, b)
			return b, nil
		}
	}
	return Block{}, fmt.Errorf("pool %q: %w: every /%d block of its %s CIDRs is held: add a CIDR to spec.ipv%d.cidrs or use a larger maskSize",
		pool, ErrExhausted, fs.MaskSize, f, f)
}

// Release frees a held block. Cost: O(log n) plus a copy.
func (a *Allocator) Release(p netip.Prefix) (Block, error) {
	i, ok := slices.BinarySearchFunc(a.held, p.Addr(), func(b Block, x netip.Addr) int { return b.Prefix.Addr().Compare(x) })
	if !ok || a.held[i].Prefix != p {
		return Block{}, fmt.Errorf("release %s: %w", p, ErrNotHeld)
	}
	b := a.held[i]
	a.held = slices.Delete(a.held, i, i+1)
	return b, nil
}

// ReleaseNode frees every block of node (the Node object was deleted).
// Cost: O(n).
func (a *Allocator) ReleaseNode(node string) []Block {
	var gone []Block
	a.held = slices.DeleteFunc(a.held, func(b Block) bool {
		if b.Node == node {
			gone = append(gone, b)
			return true
		}
		return false
	})
	return gone
}

// Usable reports whether blocks can be cut from the named pool at all
// (it exists, is valid and does not conflict). Cost: O(1).
func (a *Allocator) Usable(pool string) bool {
	ps, ok := a.pools[pool]
	return ok && ps.usable() == nil
}

// Blocks returns node's blocks ("" means every block), lowest first.
// Cost: O(n).
func (a *Allocator) Blocks(node string) []Block {
	var out []Block
	for _, b := range a.held {
		if node == "" || b.Node == node {
			out = append(out, b)
		}
	}
	return out
}

// Held returns the block holding addr's network, if any. Cost: O(log n).
func (a *Allocator) Held(p netip.Prefix) (Block, bool) {
	_, hit := a.overlapping(p)
	if hit < 0 || a.held[hit].Prefix != p {
		return Block{}, false
	}
	return a.held[hit], true
}

// overlapping returns the insertion index for p and the index of a held
// block overlapping p, or -1. Held blocks never overlap each other, so
// only the block starting at or before p and the first starting after it
// can overlap p.
func (a *Allocator) overlapping(p netip.Prefix) (int, int) {
	i, _ := slices.BinarySearchFunc(a.held, p.Addr(), func(b Block, x netip.Addr) int { return b.Prefix.Addr().Compare(x) })
	// i is the first block starting at or after p.
	if i < len(a.held) && overlaps(a.held[i].Prefix, p) {
		return i, i
	}
	if i > 0 && overlaps(a.held[i-1].Prefix, p) {
		return i, i - 1
	}
	return i, -1
}

// firstFree returns the lowest /mask block inside cidr that overlaps no
// held block.
func (a *Allocator) firstFree(cidr netip.Prefix, mask int) (netip.Prefix, bool) {
	cur := cidr.Addr()
	for cur.IsValid() && cidr.Contains(cur) {
		cand := netip.PrefixFrom(cur, mask)
		_, hit := a.overlapping(cand)
		if hit < 0 {
			return cand, true
		}
		next := ipalloc.LastAddr(a.held[hit].Prefix).Next()
		if !next.IsValid() {
			return netip.Prefix{}, false
		}
		var ok bool
		if cur, ok = alignUp(next, mask); !ok {
			return netip.Prefix{}, false
		}
	}
	return netip.Prefix{}, false
}
