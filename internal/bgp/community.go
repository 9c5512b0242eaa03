package bgp

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// community is a parsed community value: standard or large.
type community struct {
	large    bool
	standard uint32
	lc       LargeCommunity
}

// ParseCommunity parses a standard community "65000:100" (two numbers
// 0-65535) or a large one "large:1:2:3" (three numbers 0-4294967295).
// Cost: O(len(s)).
func ParseCommunity(s string) (std uint32, large LargeCommunity, isLarge bool, err error) {
	c, err := parseCommunity(s)
	return c.standard, c.lc, c.large, err
}

func parseCommunity(s string) (community, error) {
	if rest, ok := strings.CutPrefix(s, "large:"); ok {
		parts := strings.Split(rest, ":")
		if len(parts) != 3 {
			return community{}, fmt.Errorf("large community %q: write large:A:B:C with three numbers 0-4294967295", s)
		}
		var v [3]uint32
		for i, p := range parts {
			n, err := parseUint(p, 32)
			if err != nil {
				return community{}, fmt.Errorf("large community %q: %q is not a number 0-4294967295", s, p)
			}
			v[i] = uint32(n)
		}
		return community{large: true, lc: LargeCommunity{v[0], v[1], v[2]}}, nil
	}
	hi, lo, ok := strings.Cut(s, ":")
	if !ok {
		return community{}, fmt.Errorf("community %q: write two numbers 0-65535 as 65000:100, or large:A:B:C", s)
	}
	a, errA := parseUint(hi, 16)
	b, errB := parseUint(lo, 16)
	if errA != nil || errB != nil {
		return community{}, fmt.Errorf("community %q: both halves must be numbers 0-65535, e.g. 65000:100", s)
	}
	return community{standard: uint32(a)<<16 | uint32(b)}, nil
}

// parseUint accepts only plain decimal digits (no sign, no spaces).
func parseUint(s string, bits int) (uint64, error) {
	if s == "" || strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' }) >= 0 {
		return 0, strconv.ErrSyntax
	}
	return strconv.ParseUint(s, 10, bits)
}

// isCommunityLiteral tells a value from an alias name: a literal has a
// colon, an alias name never does.
func isCommunityLiteral(s string) bool { return strings.Contains(s, ":") }

// aliases maps alias names to values; names defined twice (in one object
// or two) are ambiguous and map to an error.
type aliases map[string]aliasEntry

type aliasEntry struct {
	value   community
	err     error
	objects []string
}

// buildAliases parses every alias, reporting bad values and duplicates
// as problems of the BGPCommunity objects. Cost: O(n log n).
func buildAliases(in []CommunityAlias) (aliases, []Problem) {
	sorted := slices.Clone(in)
	slices.SortFunc(sorted, func(a, b CommunityAlias) int {
		return strings.Compare(a.Object+"\x00"+a.Name, b.Object+"\x00"+b.Name)
	})
	out := aliases{}
	var problems []Problem
	for _, a := range sorted {
		e, seen := out[a.Name]
		e.objects = append(e.objects, a.Object)
		if seen {
			e.err = fmt.Errorf("alias %q is defined %d times (BGPCommunity %s): keep one", a.Name, len(e.objects), strings.Join(e.objects, ", "))
			problems = append(problems, Problem{Kind: KindCommunity, Object: a.Object, Field: "spec.communities",
				Message: e.err.Error()})
		} else if c, err := parseCommunity(a.Value); err != nil {
			e.err = err
			problems = append(problems, Problem{Kind: KindCommunity, Object: a.Object, Field: "spec.communities",
				Message: err.Error()})
		} else {
			e.value = c
		}
		out[a.Name] = e
	}
	return out, problems
}

// resolve turns an advertisement's community strings into attributes.
// The first bad entry is returned with its index.
func (al aliases) resolve(values []string) (std []uint32, large []LargeCommunity, bad int, err error) {
	for i, v := range values {
		var c community
		if isCommunityLiteral(v) {
			if c, err = parseCommunity(v); err != nil {
				return nil, nil, i, err
			}
		} else {
			e, ok := al[v]
			switch {
			case !ok:
				return nil, nil, i, fmt.Errorf("community alias %q is not defined: add it to a BGPCommunity or write the value (65000:100)", v)
			case e.err != nil:
				return nil, nil, i, e.err
			}
			c = e.value
		}
		if c.large {
			large = append(large, c.lc)
		} else {
			std = append(std, c.standard)
		}
	}
	return sortedUnique(std), sortedUniqueLarge(large), -1, nil
}

func sortedUnique(xs []uint32) []uint32 {
	slices.Sort(xs)
	return slices.Compact(xs)
}

func compareLarge(a, b LargeCommunity) int {
	if a.Global != b.Global {
		return cmpU(a.Global, b.Global)
	}
	if a.Local1 != b.Local1 {
		return cmpU(a.Local1, b.Local1)
	}
	return cmpU(a.Local2, b.Local2)
}

func cmpU(a, b uint32) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func sortedUniqueLarge(xs []LargeCommunity) []LargeCommunity {
	slices.SortFunc(xs, compareLarge)
	return slices.Compact(xs)
}
