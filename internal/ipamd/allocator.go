package ipamd

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/mooringlb/mooring/internal/ipalloc"
	"github.com/mooringlb/mooring/internal/podipam"
)

// Store persists allocations, one change at a time: the cost of a Put or
// Delete must not grow with what the store holds (every ADD pays it).
type Store interface {
	Load() ([]Allocation, error)
	Put(Allocation) error
	Delete(...Key) error
	// Replace records al and drops old in one change (re-keying).
	Replace(old Key, al Allocation) error
}

// PoolOf names the pool of a pod; nil means every pod uses the default pool.
type PoolOf func(ctx context.Context, namespace, pod string) (string, error)

// Allocator hands out pod addresses from the node's blocks. Safe for
// concurrent use; every change is saved before it is answered.
type Allocator struct {
	mu        sync.Mutex
	store     Store
	poolOf    PoolOf
	pools     map[string]Pool
	releasing map[netip.Prefix]bool
	allocs    map[Key]Allocation
	used      map[netip.Addr]Key
	pending   map[string]int // pool -> ADDs refused for lack of room since the last Usage
	last      lastAddrs      // what each pod's last freed allocation held
	// since is when this agent got each allocation (its ADD, or the
	// agent's start for one loaded from disk): reconciliation frees
	// nothing younger than its minimum age, and an agent restart starts
	// that count again (the journal keeps no times).
	since map[Key]time.Time
	now   func() time.Time
}

// NewAllocator loads every stored allocation before it returns, so nothing
// is handed out twice after a restart.
func NewAllocator(store Store, poolOf PoolOf) (*Allocator, error) {
	saved, err := store.Load()
	if err != nil {
		return nil, fmt.Errorf("ipamd: load allocations: %w", err)
	}
	a := &Allocator{store: store, poolOf: poolOf, pools: map[string]Pool{}, releasing: map[netip.Prefix]bool{},
		allocs: map[Key]Allocation{}, used: map[netip.Addr]Key{}, pending: map[string]int{}, last: newLastAddrs(maxLastAddrs),
		since: map[Key]time.Time{}, now: time.Now}
	start := a.now()
	for _, al := range saved {
		a.record(al)
		a.since[al.Key] = start
	}
	return a, nil
}

// SetClock replaces the clock that stamps new allocations (tests).
func (a *Allocator) SetClock(now func() time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.now = now
}

// SetPools replaces the node's pools and blocks. Addresses already handed
// out stay reserved whatever the new blocks are.
func (a *Allocator) SetPools(pools map[string]Pool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.pools = pools
	for p := range a.releasing {
		if !a.holds(p) {
			delete(a.releasing, p)
		}
	}
}

func (a *Allocator) holds(p netip.Prefix) bool {
	for _, pl := range a.pools {
		if slices.Contains(pl.Blocks, p) {
			return true
		}
	}
	return false
}

// Add allocates one address of each of the pod's pool's families, or
// returns the existing allocation of the same container and interface
// (ADD is idempotent). Cost: at most one map lookup per address of the
// pool's blocks (lowest free first; 253 for a /24), plus one journal append.
func (a *Allocator) Add(ctx context.Context, req AddRequest) (Allocation, error) {
	if req.ContainerID == "" || req.IfName == "" {
		return Allocation{}, fmt.Errorf("%w: container ID and interface name are required", ErrBadRequest)
	}
	pool := podipamDefault
	if a.poolOf != nil {
		p, err := a.poolOf(ctx, req.Namespace, req.Pod)
		if err != nil {
			return Allocation{}, fmt.Errorf("pool of pod %s/%s: %w", req.Namespace, req.Pod, err)
		}
		pool = p
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if al, ok, err := a.lookup(req.Key); ok || err != nil {
		return al, err
	}
	if err := ctx.Err(); err != nil {
		// The plugin stopped waiting while the pool was looked up: an
		// allocation now would be one nobody receives.
		return Allocation{}, fmt.Errorf("%w: the plugin's deadline passed before the pod's pool was known (%v): nothing was allocated, the runtime retries", ErrUnavailable, err)
	}
	pl, ok := a.pools[pool]
	if !ok || len(pl.Families) == 0 {
		a.pending[pool]++
		return Allocation{}, fmt.Errorf("pool %q: %w: this node holds no block of it yet; the agent asked the controller for one, retry shortly", pool, ErrNoBlock)
	}
	al := Allocation{Key: req.Key, Pool: pool, Namespace: req.Namespace, Pod: req.Pod, PodUID: req.PodUID}
	hint := a.last.get(podOf(al))
	for _, f := range pl.Families {
		ip, ok := a.again(pl, f, hint)
		if !ok {
			ip, ok = a.free(pl, f)
		}
		if !ok {
			// The families already reserved go back: nothing holds them
			// (no allocation, nothing stored), and a block with such an
			// address would never look empty again (never released).
			a.forget(al)
			a.pending[pool]++
			if pl.Exhausted != "" {
				return Allocation{}, fmt.Errorf("pool %q: %w: no free %s address on this node, and the controller says: %s", pool, ErrPoolExhausted, f, pl.Exhausted)
			}
			return Allocation{}, fmt.Errorf("pool %q: %w (%s): the agent asked the controller for another block, retry shortly", pool, ErrNoBlock, f)
		}
		al.IPs = append(al.IPs, ip)
		a.used[ip.Address.Addr()] = req.Key // reserved now; undone below on failure
	}
	a.allocs[req.Key] = al
	if err := a.store.Put(al); err != nil {
		a.forget(al)
		return Allocation{}, fmt.Errorf("ipamd: save allocation: %w", err)
	}
	a.since[req.Key] = a.now()
	a.last.drop(podOf(al))
	return al, nil
}

// again returns the address of family f among hint (what the pod's last
// freed allocation held) when it is still free in one of the pool's
// blocks that is not being released: a pod whose sandbox is replaced (a
// node reboot, a sandbox restart: DEL, then ADD with a new container ID)
// gets its address back instead of the lowest free one, which another pod
// on the node may have freed first. Never the gateway, the network or the
// broadcast address.
func (a *Allocator) again(pl Pool, f podipam.Family, hint []netip.Addr) (IP, bool) {
	for _, x := range hint {
		if _, taken := a.used[x]; taken {
			continue
		}
		for _, b := range pl.Blocks {
			if a.handsOut(b, f) && podAddr(b, f, x) {
				return IP{Address: netip.PrefixFrom(x, b.Bits()), Gateway: b.Addr().Next()}, true
			}
		}
	}
	return IP{}, false
}

// free finds the lowest free pod address of family f in the pool's blocks
// that are not being released. The block's first usable address is the
// gateway (the node's bridge), never a pod's.
func (a *Allocator) free(pl Pool, f podipam.Family) (IP, bool) {
	for _, b := range pl.Blocks {
		if !a.handsOut(b, f) {
			continue
		}
		gw := b.Addr().Next()
		for x := gw.Next(); podAddr(b, f, x); x = x.Next() {
			if _, taken := a.used[x]; !taken {
				return IP{Address: netip.PrefixFrom(x, b.Bits()), Gateway: gw}, true
			}
		}
	}
	return IP{}, false
}

// handsOut reports whether block b gives pods addresses of family f: of
// that family, not being released, with room past its gateway.
func (a *Allocator) handsOut(b netip.Prefix, f podipam.Family) bool {
	return podipam.FamilyOf(b) == f && !a.releasing[b] && b.Bits() < f.Bits()-1
}

// podAddr reports whether x is an address of block b a pod may hold: past
// the gateway (the block's first usable address, the node's bridge), and
// for IPv4 not the broadcast address.
func podAddr(b netip.Prefix, f podipam.Family, x netip.Addr) bool {
	return x.IsValid() && b.Contains(x) && x.Compare(b.Addr().Next()) > 0 &&
		!(f == podipam.IPv4 && x == ipalloc.LastAddr(b))
}

// lookup returns the allocation of k. An allocation stored before keys
// carried the network (an upgrade) has the key k.legacy(): the first
// request naming its container and interface with a network adopts it —
// re-keys it to k and saves that — so it is found, freed and garbage
// collected as that network's from then on. Called with a.mu held.
func (a *Allocator) lookup(k Key) (Allocation, bool, error) {
	if al, ok := a.allocs[k]; ok {
		return al, true, nil
	}
	old, ok := a.allocs[k.legacy()]
	if k.Network == "" || !ok {
		return Allocation{}, false, nil
	}
	al := old
	al.Key = k
	if err := a.store.Replace(old.Key, al); err != nil {
		return Allocation{}, false, fmt.Errorf("ipamd: save the network %q of allocation %s/%s: %w", k.Network, k.ContainerID, k.IfName, err)
	}
	a.forget(old)
	a.record(al)
	a.since[al.Key] = a.since[old.Key]
	delete(a.since, old.Key)
	return al, true, nil
}

// record indexes al (the store already holds it).
func (a *Allocator) record(al Allocation) {
	a.allocs[al.Key] = al
	for _, ip := range al.IPs {
		a.used[ip.Address.Addr()] = al.Key
	}
}

// Del frees the allocation of an attachment; an unknown one is not an
// error (CNI DEL must be idempotent).
func (a *Allocator) Del(k Key) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok, err := a.lookup(k)
	if !ok {
		return err
	}
	k = al.Key
	a.forget(al)
	if err := a.store.Delete(k); err != nil {
		a.record(al)
		return fmt.Errorf("ipamd: save release: %w", err)
	}
	delete(a.since, k)
	a.last.put(al)
	return nil
}

// forget unindexes al; its since stays until the store dropped it too
// (a failed save records it again).
func (a *Allocator) forget(al Allocation) {
	delete(a.allocs, al.Key)
	for _, ip := range al.IPs {
		if a.used[ip.Address.Addr()] == al.Key {
			delete(a.used, ip.Address.Addr())
		}
	}
}

// Get returns the allocation of an attachment (CHECK).
func (a *Allocator) Get(k Key) (Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	al, ok, err := a.lookup(k)
	if err == nil && !ok {
		err = fmt.Errorf("network %q container %s interface %s: %w", k.Network, k.ContainerID, k.IfName, ErrNotFound)
	}
	return al, err
}

// GC frees every allocation of network whose attachment is not in valid
// and returns what it freed. Without a network or without a list (valid
// nil: the runtime's GC did not say what is in use) it frees nothing and
// says why: freeing on a guess would take addresses from running pods.
// Another network's allocations are never touched. One stored before keys
// carried the network (network unknown) is adopted by network when valid
// lists its container and interface (an interface name is unique in a
// pod), and otherwise kept: it may be another network's; its DEL frees it.
func (a *Allocator) GC(network string, valid []Key) ([]Allocation, error) {
	switch {
	case network == "":
		return nil, fmt.Errorf("%w: a GC without the network's name frees nothing: the plugin is older than the agent; update it (the agent installs its own)", ErrBadRequest)
	case valid == nil:
		return nil, fmt.Errorf("%w: a GC without cni.dev/valid-attachments frees nothing: the runtime must list the attachments still in use", ErrBadRequest)
	}
	keep := make(map[Key]bool, len(valid))
	for _, k := range valid {
		keep[k.legacy()] = true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var gone []Allocation
	for k, al := range a.allocs {
		switch {
		case k.Network == "" && keep[k]:
			if _, _, err := a.lookup(Key{Network: network, ContainerID: k.ContainerID, IfName: k.IfName}); err != nil {
				return nil, err
			}
		case k.Network == network && !keep[k.legacy()]:
			gone = append(gone, al)
		}
	}
	if len(gone) == 0 {
		return nil, nil
	}
	keys := make([]Key, 0, len(gone))
	for _, al := range gone {
		a.forget(al)
		keys = append(keys, al.Key)
	}
	if err := a.store.Delete(keys...); err != nil {
		for _, al := range gone {
			a.record(al)
		}
		return nil, fmt.Errorf("ipamd: save release: %w", err)
	}
	for _, al := range gone {
		delete(a.since, al.Key)
		a.last.put(al)
	}
	return gone, nil
}

// Held returns every allocation with since when this agent knows it, for
// Reconcile.
func (a *Allocator) Held() []Held {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Held, 0, len(a.allocs))
	for _, al := range a.sorted() {
		out = append(out, Held{Allocation: al, Since: a.since[al.Key]})
	}
	return out
}

// Release frees what Reconcile chose and returns what it freed: each only
// while it is still the same allocation (held since the same time), so an
// attachment freed and added again after the snapshot keeps its new one.
// Nothing goes into the per-pod hints: the pod is gone.
func (a *Allocator) Release(gone []Held) ([]Allocation, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	var freed []Allocation
	for _, h := range gone {
		al, ok := a.allocs[h.Key]
		if ok && a.since[h.Key].Equal(h.Since) {
			freed = append(freed, al)
		}
	}
	if len(freed) == 0 {
		return nil, nil
	}
	keys := make([]Key, 0, len(freed))
	for _, al := range freed {
		a.forget(al)
		keys = append(keys, al.Key)
	}
	if err := a.store.Delete(keys...); err != nil {
		for _, al := range freed {
			a.record(al)
		}
		return nil, fmt.Errorf("ipamd: save release: %w", err)
	}
	for _, k := range keys {
		delete(a.since, k)
	}
	return freed, nil
}

// Status returns nil when some pool has a free address of each of its
// families, and an error naming why not otherwise (CNI STATUS).
func (a *Allocator) Status() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.pools) == 0 {
		return fmt.Errorf("%w: this node holds no pod address block yet", ErrNoBlock)
	}
	for _, pl := range a.pools {
		ok := len(pl.Families) > 0
		for _, f := range pl.Families {
			if _, free := a.free(pl, f); !free {
				ok = false
			}
		}
		if ok {
			return nil
		}
	}
	return fmt.Errorf("%w: every block of every pool on this node is full", ErrNoBlock)
}

// All returns every allocation (for tests and status), sorted by key.
func (a *Allocator) All() []Allocation {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.sorted()
}

func (a *Allocator) sorted() []Allocation {
	out := make([]Allocation, 0, len(a.allocs))
	for _, al := range a.allocs {
		out = append(out, al)
	}
	slices.SortFunc(out, func(x, y Allocation) int {
		return cmp.Or(cmp.Compare(x.Network, y.Network), cmp.Compare(x.ContainerID, y.ContainerID), cmp.Compare(x.IfName, y.IfName))
	})
	return out
}

// Usage is the input of podipam.Demand for one pool and family.
type Usage struct {
	Blocks  []podipam.BlockUse
	Pending int
}

// Usage reports, per pool and family, the addresses used in each block and
// the ADDs refused for lack of room since the last call.
func (a *Allocator) Usage() map[string]map[podipam.Family]*Usage {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := map[string]map[podipam.Family]*Usage{}
	get := func(pool string, f podipam.Family) *Usage {
		if out[pool] == nil {
			out[pool] = map[podipam.Family]*Usage{}
		}
		if out[pool][f] == nil {
			out[pool][f] = &Usage{}
		}
		return out[pool][f]
	}
	for name, pl := range a.pools {
		for _, f := range pl.Families {
			get(name, f)
		}
		for _, b := range pl.Blocks {
			n := 0
			for addr := range a.used {
				if b.Contains(addr) {
					n++
				}
			}
			u := get(name, podipam.FamilyOf(b))
			u.Blocks = append(u.Blocks, podipam.BlockUse{Prefix: b, Used: n})
		}
	}
	for pool, n := range a.pending {
		for _, f := range a.pools[pool].Families {
			get(pool, f).Pending += n
		}
		if len(a.pools[pool].Families) == 0 {
			get(pool, podipam.IPv4).Pending += n
		}
	}
	clear(a.pending)
	return out
}

// MarkReleasing stops handing out addresses of block b and reports whether
// b is empty, so it may be given back. A block that got an address since
// Usage is not marked and stays.
func (a *Allocator) MarkReleasing(b netip.Prefix) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	for addr := range a.used {
		if b.Contains(addr) {
			return false
		}
	}
	a.releasing[b] = true
	return true
}

const podipamDefault = "default"
