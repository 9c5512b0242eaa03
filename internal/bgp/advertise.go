package bgp

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

// adv is a validated advertisement.
type adv struct {
	*Advertisement
	attrs      *Attrs
	agg4, agg6 int
	// pools is the set of selected pools; allPools also takes addresses
	// outside every pool.
	pools    map[string]bool
	allPools bool
	peers    map[string]bool // nil: every peer
}

// validateAdvertisements resolves communities, pools and aggregation
// lengths. An invalid advertisement advertises nothing. Cost: O(A·(C+P·R)).
func validateAdvertisements(in []Advertisement, al aliases, pools []Pool) ([]*adv, []Problem) {
	var out []*adv
	var problems []Problem
	for i := range in {
		a := &adv{Advertisement: &in[i], agg4: 32, agg6: 128}
		field, err := a.resolve(al, pools)
		if err != nil {
			problems = append(problems, Problem{Kind: KindAdvertisement, Object: a.Name, Field: field, Message: err.Error(), Invalid: true})
			continue
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(x, y *adv) int { return cmp.Compare(x.Name, y.Name) })
	return out, problems
}

func (a *adv) resolve(al aliases, pools []Pool) (string, error) {
	for _, group := range []struct {
		field string
		sels  []*announce.Selector
	}{{"spec.poolSelectors", a.PoolSelectors}, {"spec.serviceSelectors", a.ServiceSelectors},
		{"spec.namespaceSelectors", a.NamespaceSelectors}, {"spec.nodeSelectors", a.NodeSelectors}} {
		for i, s := range group.sels {
			if err := s.Validate(); err != nil {
				return fmt.Sprintf("%s[%d]", group.field, i), fmt.Errorf("%w: fix the selector", err)
			}
		}
	}
	std, large, bad, err := al.resolve(a.Communities)
	if err != nil {
		return fmt.Sprintf("spec.communities[%d]", bad), err
	}
	a.attrs = &Attrs{Communities: std, Large: large}
	if a.LocalPref != nil {
		a.attrs.LocalPref, a.attrs.HasLocalPref = *a.LocalPref, true
	}
	a.attrs.key = a.attrs.computeKey()
	if a.AggregationLength != nil {
		a.agg4 = *a.AggregationLength
	}
	if a.AggregationLengthV6 != nil {
		a.agg6 = *a.AggregationLengthV6
	}
	switch {
	case a.agg4 < 0 || a.agg4 > 32:
		return "spec.aggregationLength", fmt.Errorf("aggregationLength %d must be 0-32", a.agg4)
	case a.agg6 < 0 || a.agg6 > 128:
		return "spec.aggregationLengthV6", fmt.Errorf("aggregationLengthV6 %d must be 0-128", a.agg6)
	}
	if len(a.Peers) > 0 {
		a.peers = map[string]bool{}
		for _, p := range a.Peers {
			a.peers[p] = true
		}
	}
	a.selectPools(pools)
	return a.checkAggregation(pools)
}

// selectPools resolves pool names and selectors into a set.
func (a *adv) selectPools(pools []Pool) {
	if len(a.Pools) == 0 && len(a.PoolSelectors) == 0 {
		a.allPools = true
		return
	}
	a.pools = map[string]bool{}
	for _, n := range a.Pools {
		a.pools[n] = true
	}
	for i := range pools {
		for _, s := range a.PoolSelectors {
			if s.Matches(pools[i].Labels) {
				a.pools[pools[i].Name] = true
			}
		}
	}
}

// checkAggregation refuses an aggregation length whose aggregate would
// cover addresses outside a selected pool's block.
func (a *adv) checkAggregation(pools []Pool) (string, error) {
	for i := range pools {
		p := &pools[i]
		if !a.allPools && !a.pools[p.Name] {
			continue
		}
		for _, r := range p.Ranges {
			field, agg := "spec.aggregationLength", a.agg4
			if !r.First.Is4() {
				field, agg = "spec.aggregationLengthV6", a.agg6
			}
			if need := minAggregation(r); agg < need {
				return field, fmt.Errorf("%s %d would advertise addresses outside block %s of pool %s: use at least %d (or select only pools whose blocks are aligned to %d)",
					field[len("spec."):], agg, r, p.Name, need, agg)
			}
		}
	}
	return "", nil
}

// minAggregation is the shortest prefix length whose prefixes around any
// address of r stay inside r. Cost: O(bits).
func minAggregation(r ipalloc.Range) int {
	bits := r.First.BitLen()
	for l := 0; l < bits; l++ {
		first := netip.PrefixFrom(r.First, l).Masked()
		last := ipalloc.PrefixRange(netip.PrefixFrom(r.Last, l))
		if first.Addr() == r.First && last.Last == r.Last {
			return l
		}
	}
	return bits
}

// selectsService reports whether the advertisement picks svc (labels,
// virtual labels, namespace labels).
func (a *adv) selectsService(svc *announce.Service, namespaces map[string]map[string]string) bool {
	if len(a.ServiceSelectors) > 0 && !slices.ContainsFunc(a.ServiceSelectors, func(s *announce.Selector) bool { return s.MatchesService(svc) }) {
		return false
	}
	if len(a.NamespaceSelectors) > 0 {
		labels := namespaces[svc.Key.Namespace]
		if !slices.ContainsFunc(a.NamespaceSelectors, func(s *announce.Selector) bool { return s.Matches(labels) }) {
			return false
		}
	}
	return true
}

// prefixFor is the advertised prefix of addr under a.
func (a *adv) prefixFor(addr netip.Addr) netip.Prefix {
	bits := a.agg4
	if !addr.Is4() {
		bits = a.agg6
	}
	return netip.PrefixFrom(addr, bits).Masked()
}

// poolIndex finds the pools holding an address.
type poolIndex struct {
	ranges []ipalloc.Range
	owner  []string
}

func newPoolIndex(pools []Pool) poolIndex {
	var ix poolIndex
	for _, p := range pools {
		for _, r := range p.Ranges {
			ix.ranges = append(ix.ranges, r)
			ix.owner = append(ix.owner, p.Name)
		}
	}
	return ix
}

// selects reports whether a selects addr by its pools. Cost: O(R) for R
// blocks in all pools (tens in practice).
func (ix poolIndex) selects(a *adv, addr netip.Addr) bool {
	inAny := false
	for i, r := range ix.ranges {
		if r.Contains(addr) {
			if a.allPools || a.pools[ix.owner[i]] {
				return true
			}
			inAny = true
		}
	}
	// An address outside every pool (imported, or an external IP) is
	// advertised only by an advertisement that selects every pool, and
	// never aggregated (no block says what is around it).
	return a.allPools && !inAny
}

// inAnyPool reports whether addr lies in some pool.
func (ix poolIndex) inAnyPool(addr netip.Addr) bool {
	return slices.ContainsFunc(ix.ranges, func(r ipalloc.Range) bool { return r.Contains(addr) })
}
