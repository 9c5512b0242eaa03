package conntrack

import (
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestMatchSelects(t *testing.T) {
	a := netip.MustParseAddr
	m := Match{To: []netip.Addr{a("10.213.0.120"), a("fd00:213::78")},
		Via: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:244:0:2::/64")}}
	for _, tc := range []struct {
		dst, reply string
		want       bool
	}{
		{"10.213.0.120", "10.244.2.7", true},        // the address, DNATed to the dead node
		{"fd00:213::78", "fd00:244:0:2::9", true},   // IPv6 alike
		{"::ffff:10.213.0.120", "10.244.2.7", true}, // v4-mapped in either field
		{"10.213.0.120", "10.244.3.7", false},       // a live node's endpoint
		{"10.213.0.121", "10.244.2.7", false},       // another address
		{"10.244.2.7", "10.244.2.7", false},         // not translated: no Service traffic
		{"10.213.0.120", "", false},                 // incomplete entry
	} {
		var reply netip.Addr
		if tc.reply != "" {
			reply = a(tc.reply)
		}
		if got := m.Selects(a(tc.dst), reply, false); got != tc.want {
			t.Errorf("Selects(%s, %s) = %v, want %v", tc.dst, tc.reply, got, tc.want)
		}
	}
	if !m.Selects(a("10.213.0.120"), a("10.244.2.7"), true) {
		t.Error("a Match without Unreplied must select an entry that has seen a reply")
	}
	m.Unreplied = true
	if m.Selects(a("10.213.0.120"), a("10.244.2.7"), true) || !m.Selects(a("10.213.0.120"), a("10.244.2.7"), false) {
		t.Error("Unreplied must select only entries that have seen no reply")
	}
	any := Match{Via: m.Via}
	if !any.Selects(a("10.96.0.10"), a("10.244.2.7"), false) {
		t.Error("a Match without To must select a translation to Via from any address")
	}
	if !(Match{}).Empty() || m.Empty() {
		t.Error("Empty")
	}
}

// The set lookup agrees with a scan of every prefix, over random sets of
// mixed lengths and families and addresses near them.
func TestPrefixSetAgreesWithScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 13))
	addr := func() netip.Addr {
		if rng.IntN(3) == 0 {
			var b [16]byte
			b[0], b[1], b[15] = 0xfd, 0x00, byte(rng.IntN(4))
			b[7] = byte(rng.IntN(4))
			return netip.AddrFrom16(b)
		}
		return netip.AddrFrom4([4]byte{10, byte(rng.IntN(3)), byte(rng.IntN(4)), byte(rng.IntN(8))})
	}
	for range 200 {
		var ps []netip.Prefix
		for range rng.IntN(40) {
			a := addr()
			bits := []int{8, 16, 22, 24, 30, 32}[rng.IntN(6)]
			if a.Is6() {
				bits = []int{48, 56, 64, 120, 128}[rng.IntN(5)]
			}
			ps = append(ps, netip.PrefixFrom(a, bits)) // not masked: NewPrefixSet masks
		}
		s := NewPrefixSet(ps)
		for range 100 {
			a := addr()
			want := false
			for _, p := range ps {
				want = want || p.Masked().Contains(a)
			}
			if got := s.Contains(a); got != want {
				t.Fatalf("Contains(%s) = %v, scan says %v; prefixes %v", a, got, want, ps)
			}
			if got := s.Contains(netip.AddrFrom16(a.As16())); a.Is4() && got != want {
				t.Fatalf("Contains(v4-mapped %s) = %v, want %v", a, got, want)
			}
		}
	}
}

// FuzzMatcher: the compiled Matcher selects exactly what the rule says,
// written out separately.
func FuzzMatcher(f *testing.F) {
	f.Add([]byte{10, 213, 0, 120}, []byte{10, 244, 2, 7}, []byte{10, 244, 2, 0}, uint8(24), false, true)
	f.Add([]byte{10, 213, 0, 121}, []byte{10, 244, 3, 7}, []byte{10, 244, 2, 0}, uint8(24), true, false)
	f.Fuzz(func(t *testing.T, dst, reply, via []byte, bits uint8, replied, unreplied bool) {
		d, ok1 := netip.AddrFromSlice(dst)
		r, ok2 := netip.AddrFromSlice(reply)
		v, ok3 := netip.AddrFromSlice(via)
		if !ok1 || !ok2 || !ok3 {
			return
		}
		p := netip.PrefixFrom(v, int(bits)%(v.BitLen()+1))
		m := Match{To: []netip.Addr{netip.MustParseAddr("10.213.0.120"), d.Unmap()}, Via: []netip.Prefix{p}, Unreplied: unreplied}
		// The rule: addresses compare without IPv4 mapping (a mapped
		// prefix of 96 bits or more is the IPv4 prefix it maps).
		if v.Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(v.Unmap(), p.Bits()-96)
		}
		want := d.Unmap() != r.Unmap() && !(unreplied && replied) && p.Masked().Contains(r.Unmap())
		if got := m.Matcher().Selects(d, r, replied); got != want {
			t.Fatalf("Selects(%s, %s, replied %v) with %v unreplied=%v = %v, want %v", d, r, replied, p, unreplied, got, want)
		}
	})
}
