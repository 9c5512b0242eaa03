package podipam

import "errors"

// Sentinel errors; callers test them with errors.Is. The wrapping errors
// name the pool, node or block and what to do.
var (
	// ErrNotReady: the allocator has not imported every held block yet.
	ErrNotReady = errors.New("pod IPAM allocator is not ready: held blocks not imported yet")
	// ErrUnknownPool: no pool of that name.
	ErrUnknownPool = errors.New("no such pod IP pool")
	// ErrNoFamily: the pool has no CIDRs of the requested family.
	ErrNoFamily = errors.New("pod IP pool has no CIDR of this family")
	// ErrExhausted: every block of the pool's CIDRs is held.
	ErrExhausted = errors.New("pod IP pool is exhausted")
	// ErrConflicting: the pool overlaps an older pool and cuts nothing.
	ErrConflicting = errors.New("pod IP pool overlaps an older pool")
	// ErrInvalidPool: a pool's CIDRs or mask size are unusable.
	ErrInvalidPool = errors.New("invalid pod IP pool")
	// ErrOverlap: an imported block overlaps one already held.
	ErrOverlap = errors.New("block overlaps a block already held")
	// ErrNotHeld: no such block is held.
	ErrNotHeld = errors.New("block is not held")
)
