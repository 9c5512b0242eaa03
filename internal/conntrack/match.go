package conntrack

import (
	"net/netip"
	"slices"
)

// Match selects the entries to delete: connections to one of To (the
// addresses a client dialled: LoadBalancer addresses; empty means any)
// that were translated to an endpoint inside Via (the dead node's endpoint
// addresses, pod ranges and node addresses). An entry whose reply comes
// from the address the client dialled was not translated and is left
// alone: it is nobody's Service traffic.
//
// With Unreplied, only entries that have seen no reply are selected: the
// connection attempts pinned to an endpoint that never answered (every
// retransmitted SYN, and a new connection reusing the client port, would
// follow them). Those are safe to delete even if the node was alive after
// all: the next SYN is simply load-balanced again. An established
// connection's entry is kept: deleting it would reset a live connection on
// a false alarm, and to a dead endpoint it cannot succeed anyway.
type Match struct {
	To        []netip.Addr
	Via       []netip.Prefix
	Unreplied bool
}

// Selects reports whether the entry with original destination origDst,
// reply source replySrc and whether it has seen a reply is one Match
// deletes. It builds the lookup sets for this one question: to judge many
// entries use Matcher. Cost: O(len(To)+len(Via)).
func (m Match) Selects(origDst, replySrc netip.Addr, replied bool) bool {
	return m.Matcher().Selects(origDst, replySrc, replied)
}

// Empty reports whether m can select nothing.
func (m Match) Empty() bool { return len(m.Via) == 0 }

// Matcher is a Match compiled into sets, for a table of entries. Build:
// O(len(To)+len(Via)).
type Matcher struct {
	to        map[netip.Addr]struct{} // nil: any
	via       PrefixSet
	unreplied bool
}

// Matcher compiles m.
func (m Match) Matcher() *Matcher {
	x := &Matcher{via: NewPrefixSet(m.Via), unreplied: m.Unreplied}
	if len(m.To) > 0 {
		x.to = make(map[netip.Addr]struct{}, len(m.To))
		for _, a := range m.To {
			x.to[a.Unmap()] = struct{}{}
		}
	}
	return x
}

// Selects is Match.Selects. Cost: one map lookup for the destination, and
// one per distinct prefix length of Via in the reply source's family (a
// node's ranges and addresses have a handful: /24, /32, /64, /128).
func (x *Matcher) Selects(origDst, replySrc netip.Addr, replied bool) bool {
	origDst, replySrc = origDst.Unmap(), replySrc.Unmap()
	if !origDst.IsValid() || !replySrc.IsValid() || origDst == replySrc || x.unreplied && replied {
		return false
	}
	if x.to != nil {
		if _, ok := x.to[origDst]; !ok {
			return false
		}
	}
	return x.via.Contains(replySrc)
}

// PrefixSet answers whether an address lies in any of a set of prefixes:
// one map of masked prefixes, probed once per distinct prefix length of
// the address's family (at most 33 for IPv4, 129 for IPv6, in practice a
// few), instead of a scan of every prefix.
type PrefixSet struct {
	lens4, lens6 []int
	set          map[netip.Prefix]struct{}
}

// NewPrefixSet builds the set; invalid prefixes are ignored, IPv4-mapped
// IPv6 prefixes are taken as IPv4.
func NewPrefixSet(ps []netip.Prefix) PrefixSet {
	s := PrefixSet{set: make(map[netip.Prefix]struct{}, len(ps))}
	for _, p := range ps {
		if !p.IsValid() {
			continue
		}
		if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
		}
		p = p.Masked()
		s.set[p] = struct{}{}
		if p.Addr().Is4() {
			s.lens4 = append(s.lens4, p.Bits())
		} else {
			s.lens6 = append(s.lens6, p.Bits())
		}
	}
	for _, l := range []*[]int{&s.lens4, &s.lens6} {
		slices.Sort(*l)
		*l = slices.Compact(*l)
	}
	return s
}

// Contains reports whether a is inside one of the prefixes.
func (s PrefixSet) Contains(a netip.Addr) bool {
	a = a.Unmap()
	lens := s.lens6
	if a.Is4() {
		lens = s.lens4
	}
	for _, l := range lens {
		if p, err := a.Prefix(l); err == nil {
			if _, ok := s.set[p]; ok {
				return true
			}
		}
	}
	return false
}

// families reports whether the set holds IPv4 and IPv6 prefixes.
func (s PrefixSet) families() (v4, v6 bool) { return len(s.lens4) > 0, len(s.lens6) > 0 }

// Len is the number of distinct prefixes.
func (s PrefixSet) Len() int { return len(s.set) }
