package lbipam

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// ParseCIDRBlock parses a pool block written as a CIDR. The CIDR must be the
// network address itself ("192.0.2.0/24", not "192.0.2.5/24"): a host
// address there is nearly always a typo, and silently masking it would hand
// out addresses the operator did not mean.
func ParseCIDRBlock(s string) (Block, error) {
	p, err := netip.ParsePrefix(strings.TrimSpace(s))
	if err != nil {
		return Block{}, fmt.Errorf("block %q is not a CIDR such as 192.0.2.0/24 or 2001:db8::/64: %w", s, err)
	}
	if p.Addr().Is4In6() {
		return Block{}, fmt.Errorf("block %q is an IPv4-mapped IPv6 prefix: write the IPv4 CIDR itself", s)
	}
	if m := p.Masked(); m != p {
		return Block{}, fmt.Errorf("block %q has host bits set: use the network address %s", s, m)
	}
	r := ipalloc.PrefixRange(p)
	return Block{First: r.First, Last: r.Last, FromCIDR: true, Bits: p.Bits()}, nil
}

// ParseRangeBlock parses a pool block written as an inclusive start/stop
// pair of one family (IPv6 included, whose order admission cannot check).
func ParseRangeBlock(start, stop string) (Block, error) {
	first, err := parseOneAddr(start, "start")
	if err != nil {
		return Block{}, err
	}
	last, err := parseOneAddr(stop, "stop")
	if err != nil {
		return Block{}, err
	}
	if msg := RangeProblem(first, last); msg != "" {
		return Block{}, errors.New(msg)
	}
	return Block{First: first, Last: last}, nil
}

// ParseRangeEnds parses a start/stop pair's two addresses and leaves their
// order and families to the pool's validation, which reports a bad range
// in the pool's Invalid list and by family in Service reasons ("the IPv6
// block is reversed", not "add an IPv6 block"). An address that does not
// parse is an error.
func ParseRangeEnds(start, stop string) (Block, error) {
	first, err := parseOneAddr(start, "start")
	if err != nil {
		return Block{}, err
	}
	last, err := parseOneAddr(stop, "stop")
	if err != nil {
		return Block{}, err
	}
	return Block{First: first, Last: last}, nil
}

func parseOneAddr(s, what string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	switch {
	case err != nil:
		return a, fmt.Errorf("range %s %q is not an IP address such as 192.0.2.10 or 2001:db8::10: %w", what, s, err)
	case a.Zone() != "":
		return a, fmt.Errorf("range %s %q has an IPv6 zone: remove %%%s", what, s, a.Zone())
	case a.Is4In6():
		return a, fmt.Errorf("range %s %q is an IPv4-mapped IPv6 address: write %s", what, s, a.Unmap())
	}
	return a, nil
}

// ParseIPsAnnotation parses the requested-addresses annotation: comma
// separated, spaces trimmed, at most one address per family. An empty or
// blank string requests nothing.
func ParseIPsAnnotation(s string) ([]netip.Addr, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []netip.Addr
	for _, tok := range strings.Split(s, ",") {
		tok = strings.TrimSpace(tok)
		a, err := netip.ParseAddr(tok)
		switch {
		case tok == "":
			return nil, fmt.Errorf("empty entry in %q: separate addresses with a single comma, e.g. \"192.0.2.5, 2001:db8::5\"", s)
		case err != nil:
			return nil, fmt.Errorf("%q is not an IP address: write one IPv4 and/or one IPv6 address, e.g. \"192.0.2.5, 2001:db8::5\"", tok)
		case a.Zone() != "":
			return nil, fmt.Errorf("%q carries an IPv6 zone: remove %%%s", tok, a.Zone())
		case a.Is4In6():
			return nil, fmt.Errorf("%q is an IPv4-mapped IPv6 address: write %s", tok, a.Unmap())
		}
		for _, prev := range out {
			if FamilyOf(prev) == FamilyOf(a) {
				return nil, fmt.Errorf("%q and %q are both IPv%d: request at most one address per family", prev, tok, FamilyOf(a))
			}
		}
		out = append(out, a)
	}
	return out, nil
}

// ParsePoolsAnnotation parses the pool-restriction annotation: comma
// separated names, trimmed, empty entries and repeats dropped, order kept.
// It never fails: an unknown name is reported by Assign as PoolNotFound,
// where the operator sees it.
func ParsePoolsAnnotation(s string) []string {
	var out []string
	for _, tok := range strings.Split(s, ",") {
		tok = strings.TrimSpace(tok)
		if tok == "" || containsString(out, tok) {
			continue
		}
		out = append(out, tok)
	}
	return out
}

func containsString(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}
