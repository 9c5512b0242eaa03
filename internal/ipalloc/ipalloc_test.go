package ipalloc

import (
	"errors"
	"math/big"
	"math/rand"
	"net/netip"
	"testing"
)

func mustRange(t testing.TB, a, b string) Range {
	t.Helper()
	return Range{netip.MustParseAddr(a), netip.MustParseAddr(b)}
}

func TestRangeSizeAndValidate(t *testing.T) {
	tests := []struct {
		first, last string
		size        string
		valid       bool
	}{
		{"192.0.2.0", "192.0.2.255", "256", true},
		{"192.0.2.7", "192.0.2.7", "1", true},
		{"2001:db8::", "2001:db8::ffff:ffff:ffff:ffff", "18446744073709551616", true},
		{"::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "340282366920938463463374607431768211456", true},
		{"192.0.2.9", "192.0.2.1", "", false},
		{"2001:db8::9", "2001:db8::1", "", false},
		{"192.0.2.1", "2001:db8::1", "", false},
	}
	for _, tt := range tests {
		r := mustRange(t, tt.first, tt.last)
		err := r.Validate()
		if (err == nil) != tt.valid {
			t.Errorf("%s: Validate() = %v, want valid=%v", r, err, tt.valid)
		}
		if err != nil && !errors.Is(err, ErrInvalidRange) {
			t.Errorf("%s: error %v is not ErrInvalidRange", r, err)
		}
		if tt.valid && r.Size().String() != tt.size {
			t.Errorf("%s: Size() = %s, want %s", r, r.Size(), tt.size)
		}
	}
}

func TestPrefixRange(t *testing.T) {
	for p, want := range map[string]string{
		"192.0.2.0/24":  "192.0.2.0-192.0.2.255",
		"192.0.2.4/31":  "192.0.2.4-192.0.2.5",
		"192.0.2.4/32":  "192.0.2.4",
		"2001:db8::/64": "2001:db8::-2001:db8::ffff:ffff:ffff:ffff",
		"0.0.0.0/0":     "0.0.0.0-255.255.255.255",
	} {
		if got := PrefixRange(netip.MustParsePrefix(p)).String(); got != want {
			t.Errorf("PrefixRange(%s) = %s, want %s", p, got, want)
		}
	}
}

func TestSubtractAndNormalize(t *testing.T) {
	r := mustRange(t, "10.0.0.0", "10.0.0.255")
	minus := Normalize([]Range{
		mustRange(t, "10.0.0.100", "10.0.0.110"),
		mustRange(t, "10.0.0.0", "10.0.0.9"),
		mustRange(t, "10.0.0.10", "10.0.0.12"), // adjacent: merged
		mustRange(t, "2001:db8::", "2001:db8::ff"),
		mustRange(t, "10.0.0.250", "10.0.1.10"),
	})
	if len(minus) != 4 {
		t.Fatalf("Normalize: %v", minus)
	}
	got := Subtract(r, minus)
	want := []Range{mustRange(t, "10.0.0.13", "10.0.0.99"), mustRange(t, "10.0.0.111", "10.0.0.249")}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Subtract = %v, want %v", got, want)
	}
	if got := Subtract(r, Normalize([]Range{mustRange(t, "9.0.0.0", "11.0.0.0")})); len(got) != 0 {
		t.Fatalf("fully covered: %v", got)
	}
}

func TestSetFirstFree(t *testing.T) {
	var s Set
	r := mustRange(t, "2001:db8::", "2001:db8::ffff:ffff:ffff:ffff")
	for i := 0; i < 1000; i++ {
		a, err := s.FirstFree(r)
		if err != nil {
			t.Fatal(err)
		}
		if want := add(r.First, uint64(i)); a != want {
			t.Fatalf("step %d: got %s want %s", i, a, want)
		}
		if err := s.Insert(a); err != nil {
			t.Fatal(err)
		}
	}
	hole := add(r.First, 500)
	s.Remove(hole)
	if a, _ := s.FirstFree(r); a != hole {
		t.Fatalf("hole: got %s want %s", a, hole)
	}
	if !errors.Is(s.Insert(r.First), ErrInUse) {
		t.Fatal("Insert of a member must fail with ErrInUse")
	}
	if n := s.CountIn(mustRange(t, "2001:db8::10", "2001:db8::1f")); n != 16 {
		t.Fatalf("CountIn = %d", n)
	}
	want := new(big.Int).Sub(r.Size(), big.NewInt(999))
	if got := s.FreeIn(r); got.Cmp(want) != 0 {
		t.Fatalf("FreeIn = %s want %s", got, want)
	}
}

func TestAllocator(t *testing.T) {
	a, err := NewAllocator(mustRange(t, "192.0.2.1", "192.0.2.2"), mustRange(t, "198.51.100.7", "198.51.100.7"))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		addr, err := a.AllocFirst()
		if errors.Is(err, ErrFull) {
			break
		}
		got = append(got, addr.String())
	}
	if want := "[192.0.2.1 192.0.2.2 198.51.100.7]"; fmtSlice(got) != want {
		t.Fatalf("order %v want %s", got, want)
	}
	if err := a.Alloc(netip.MustParseAddr("192.0.2.9")); !errors.Is(err, ErrOutOfRange) {
		t.Fatalf("Alloc outside: %v", err)
	}
	if err := a.Alloc(netip.MustParseAddr("192.0.2.2")); !errors.Is(err, ErrInUse) {
		t.Fatalf("Alloc used: %v", err)
	}
	if err := a.Free(netip.MustParseAddr("192.0.2.2")); err != nil || a.FreeCount().Int64() != 1 || a.Used() != 2 {
		t.Fatalf("Free: %v free=%s used=%d", err, a.FreeCount(), a.Used())
	}
	if _, err := NewAllocator(mustRange(t, "192.0.2.9", "192.0.2.1")); !errors.Is(err, ErrInvalidRange) {
		t.Fatalf("NewAllocator(bad) = %v", err)
	}
}

func fmtSlice(xs []string) string {
	out := "["
	for i, x := range xs {
		if i > 0 {
			out += " "
		}
		out += x
	}
	return out + "]"
}

func TestFirstFreeFullAndEnds(t *testing.T) {
	var s Set
	r := mustRange(t, "255.255.255.254", "255.255.255.255")
	for i := 0; i < 2; i++ {
		a, err := s.FirstFree(r)
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Insert(a)
	}
	if _, err := s.FirstFree(r); !errors.Is(err, ErrFull) {
		t.Fatalf("want ErrFull, got %v", err)
	}
	r6 := mustRange(t, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")
	_ = s.Insert(r6.First)
	if _, err := s.FirstFree(r6); !errors.Is(err, ErrFull) {
		t.Fatalf("want ErrFull at top of IPv6, got %v", err)
	}
}

// BenchmarkFirstFreeV6 shows cost and memory do not depend on the range:
// the set holds 10,000 members at the bottom of a /64.
func BenchmarkFirstFreeV6(b *testing.B) {
	var s Set
	r := Range{netip.MustParseAddr("2001:db8::"), netip.MustParseAddr("2001:db8::ffff:ffff:ffff:ffff")}
	for i := 0; i < 10000; i++ {
		_ = s.Insert(add(r.First, uint64(i)))
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := s.FirstFree(r); err != nil {
			b.Fatal(err)
		}
	}
}

// TestFirstFreeAgainstBruteForce compares the binary search with a linear
// scan on random sets in a small range (deterministic seed).
func TestFirstFreeAgainstBruteForce(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	base := netip.MustParseAddr("10.0.0.0")
	for iter := 0; iter < 2000; iter++ {
		var s Set
		for n := rnd.Intn(40); n > 0; n-- {
			_ = s.Insert(add(base, uint64(rnd.Intn(48))))
		}
		lo := rnd.Intn(40)
		r := Range{add(base, uint64(lo)), add(base, uint64(lo+rnd.Intn(8)))}
		var want netip.Addr
		count := 0
		for a := r.First; !r.Last.Less(a); a = a.Next() {
			if s.Contains(a) {
				count++
			} else if !want.IsValid() {
				want = a
			}
		}
		got, err := s.FirstFree(r)
		if want.IsValid() != (err == nil) || (err == nil && got != want) {
			t.Fatalf("iter %d: FirstFree(%s) = %v, %v; want %v (set %v)", iter, r, got, err, want, s.All())
		}
		if s.CountIn(r) != count {
			t.Fatalf("iter %d: CountIn(%s) = %d, want %d", iter, r, s.CountIn(r), count)
		}
	}
}

// LastAddr is the one "last address of a prefix" helper (podipam, ipamd and
// doctor use it too): masked or not, either family, the extremes.
func TestLastAddr(t *testing.T) {
	for p, want := range map[string]string{"10.0.0.0/24": "10.0.0.255", "10.0.0.4/32": "10.0.0.4", "10.0.0.77/26": "10.0.0.127",
		"fd00::/120": "fd00::ff", "fd00::1234/64": "fd00::ffff:ffff:ffff:ffff", "::/0": "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
		"0.0.0.0/0": "255.255.255.255", "::ffff:10.0.0.0/120": "::ffff:10.0.0.255"} {
		if got := LastAddr(netip.MustParsePrefix(p)); got.String() != want {
			t.Errorf("LastAddr(%s) = %s, want %s", p, got, want)
		}
	}
}
