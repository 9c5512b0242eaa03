package importer

import (
	"fmt"
	"net/netip"
	"strings"
)

// metallbAddress converts one entry of MetalLB's addresses list: a CIDR
// (host bits are masked, as MetalLB's net.ParseCIDR does) or an inclusive
// "start-stop" range. note is non-empty when the form changed.
func metallbAddress(s string) (b Block, note string, err error) {
	t := strings.TrimSpace(s)
	if start, stop, ok := strings.Cut(t, "-"); ok {
		first, err := parseAddr(start, "start")
		if err != nil {
			return Block{}, "", fmt.Errorf("range %q: %w", s, err)
		}
		last, err := parseAddr(stop, "end")
		if err != nil {
			return Block{}, "", fmt.Errorf("range %q: %w", s, err)
		}
		if first.Is4() != last.Is4() {
			return Block{}, "", fmt.Errorf("range %q mixes IPv4 and IPv6", s)
		}
		if last.Less(first) {
			return Block{}, "", fmt.Errorf("range %q: start %s is after the end %s", s, first, last)
		}
		return Block{Start: first.String(), Stop: last.String()}, "", nil
	}
	p, err := netip.ParsePrefix(t)
	if err != nil {
		return Block{}, "", fmt.Errorf("%q is neither a CIDR (192.0.2.0/24) nor a range (192.0.2.10-192.0.2.20): %w", s, err)
	}
	if p.Addr().Zone() != "" {
		return Block{}, "", fmt.Errorf("%q carries an IPv6 zone", s)
	}
	p = unmapPrefix(p)
	m := p.Masked()
	if m.String() != t {
		note = fmt.Sprintf("%q written as %s (MetalLB masks host bits the same way: same addresses)", s, m)
	}
	return Block{CIDR: m.String()}, note, nil
}

// unmapPrefix turns an IPv4-mapped IPv6 prefix (::ffff:192.0.2.0/120) into
// the IPv4 prefix Go's net package would also treat it as.
func unmapPrefix(p netip.Prefix) netip.Prefix {
	if !p.Addr().Is4In6() || p.Bits() < 96 {
		return p
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
}

func parseAddr(s, what string) (netip.Addr, error) {
	a, err := netip.ParseAddr(strings.TrimSpace(s))
	if err != nil {
		return netip.Addr{}, fmt.Errorf("%s %q is not an IP address", what, strings.TrimSpace(s))
	}
	if a.Zone() != "" {
		return netip.Addr{}, fmt.Errorf("%s %q carries an IPv6 zone", what, s)
	}
	return a.Unmap(), nil
}

// ciliumBlock converts one Cilium block: cidr (host bits masked, noted), or
// start with an optional stop (a lone start is a single address, as Cilium
// reads it).
func ciliumBlock(cidr, start, stop string) (b Block, fromCIDR bool, note string, err error) {
	switch {
	case cidr != "" && (start != "" || stop != ""):
		return Block{}, false, "", fmt.Errorf("set either cidr or start/stop, not both")
	case cidr != "":
		p, err := netip.ParsePrefix(strings.TrimSpace(cidr))
		if err != nil {
			return Block{}, false, "", fmt.Errorf("cidr %q is not a CIDR such as 192.0.2.0/24: %w", cidr, err)
		}
		p = unmapPrefix(p)
		m := p.Masked()
		if m.String() != strings.TrimSpace(cidr) {
			note = fmt.Sprintf("cidr %q written as %s: same addresses", cidr, m)
		}
		return Block{CIDR: m.String()}, true, note, nil
	case start == "":
		return Block{}, false, "", fmt.Errorf("a block needs cidr or start")
	}
	first, err := parseAddr(start, "start")
	if err != nil {
		return Block{}, false, "", err
	}
	last := first
	if stop != "" {
		if last, err = parseAddr(stop, "stop"); err != nil {
			return Block{}, false, "", err
		}
	} else {
		note = fmt.Sprintf("start %s without stop is the single address %s (as Cilium reads it): stop set explicitly", first, first)
	}
	if first.Is4() != last.Is4() {
		return Block{}, false, "", fmt.Errorf("start %s and stop %s are of different IP families", first, last)
	}
	if last.Less(first) {
		return Block{}, false, "", fmt.Errorf("start %s is after stop %s", first, last)
	}
	return Block{Start: first.String(), Stop: last.String()}, false, note, nil
}
