package podipam

import (
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Pool is one pool as the core sees it: a name, an age and per-family CIDRs
// with the size of the blocks cut from them.
type Pool struct {
	Name string
	// Order is the pool's age: lower is older (the adapter passes the
	// creation timestamp in Unix nanoseconds). Ties are broken by name.
	Order int64
	V4    FamilySpec
	V6    FamilySpec
}

// FamilySpec is one family of a pool. No CIDRs means the pool has no
// addresses of that family.
type FamilySpec struct {
	CIDRs    []netip.Prefix
	MaskSize int
}

// Spec returns the pool's spec of family f.
func (p *Pool) Spec(f Family) FamilySpec {
	if f == IPv6 {
		return p.V6
	}
	return p.V4
}

// Validate joins every problem of the pool, each naming the fix.
func (p *Pool) Validate() error {
	var errs []error
	for _, f := range []Family{IPv4, IPv6} {
		fs := p.Spec(f)
		for i, c := range fs.CIDRs {
			switch {
			case !c.IsValid():
				errs = append(errs, fmt.Errorf("%w: %s cidr %d is not a CIDR", ErrInvalidPool, f, i))
				continue
			case FamilyOf(c) != f:
				errs = append(errs, fmt.Errorf("%w: %s is not an %s CIDR: move it to the other family", ErrInvalidPool, c, f))
				continue
			case c.Masked() != c:
				errs = append(errs, fmt.Errorf("%w: %s has bits set after its prefix: write %s", ErrInvalidPool, c, c.Masked()))
				continue
			}
			if err := checkMask(c, fs.MaskSize); err != nil {
				errs = append(errs, err)
			}
			for _, d := range fs.CIDRs[:i] {
				if d.IsValid() && overlaps(c, d) {
					errs = append(errs, fmt.Errorf("%w: %s overlaps %s in the same pool: remove one", ErrInvalidPool, c, d))
				}
			}
		}
	}
	return errors.Join(errs...)
}

// poolState is a pool with what the allocator concluded about it.
type poolState struct {
	Pool
	invalid     error  // Validate's result
	conflictsOf string // the older pool it overlaps, "" when none
}

// usable reports whether blocks may be cut from the pool.
func (s *poolState) usable() error {
	switch {
	case s.invalid != nil:
		return fmt.Errorf("pool %q: %w", s.Name, s.invalid)
	case s.conflictsOf != "":
		return fmt.Errorf("pool %q: %w %q: remove the overlapping CIDRs from one of them", s.Name, ErrConflicting, s.conflictsOf)
	}
	return nil
}

// resolve validates pools and marks each pool that overlaps an older usable
// pool as conflicting (Cilium LB-IPAM's rule: the newer pool loses, so an
// added pool never disturbs one already in use). Cost: O(p² · c²) for p
// pools of c CIDRs — pools are few.
func resolve(pools []Pool) map[string]*poolState {
	sorted := slices.Clone(pools)
	slices.SortFunc(sorted, func(a, b Pool) int {
		return cmp.Or(cmp.Compare(a.Order, b.Order), cmp.Compare(a.Name, b.Name))
	})
	out := make(map[string]*poolState, len(sorted))
	var accepted []*poolState
	for _, p := range sorted {
		s := &poolState{Pool: p, invalid: p.Validate()}
		if s.invalid == nil {
			s.conflictsOf = firstOverlap(p, accepted)
			if s.conflictsOf == "" {
				accepted = append(accepted, s)
			}
		}
		out[p.Name] = s
	}
	return out
}

func firstOverlap(p Pool, older []*poolState) string {
	for _, o := range older {
		for _, f := range []Family{IPv4, IPv6} {
			for _, a := range p.Spec(f).CIDRs {
				for _, b := range o.Spec(f).CIDRs {
					if overlaps(a, b) {
						return o.Name
					}
				}
			}
		}
	}
	return ""
}
