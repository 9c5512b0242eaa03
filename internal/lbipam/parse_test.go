package lbipam

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

func TestParsers(t *testing.T) {
	for _, s := range []string{"192.0.2.5/24", "::ffff:192.0.2.0/120", "192.0.2.0", "fe80::/64%eth0"} {
		if _, err := ParseCIDRBlock(s); err == nil {
			t.Errorf("ParseCIDRBlock(%q) accepted", s)
		}
	}
	if _, err := ParseCIDRBlock("192.0.2.5/24"); err == nil || !strings.Contains(err.Error(), "192.0.2.0/24") {
		t.Errorf("host bits error must name the fix: %v", err)
	}
	for _, p := range [][2]string{{"2001:db8::9", "2001:db8::1"}, {"192.0.2.1", "2001:db8::1"}, {"x", "192.0.2.1"}, {"fe80::1%eth0", "fe80::2"}} {
		if _, err := ParseRangeBlock(p[0], p[1]); err == nil {
			t.Errorf("ParseRangeBlock(%q) accepted", p)
		}
	}
	got, err := ParseIPsAnnotation(" 192.0.2.5 , 2001:db8::5")
	if err != nil || len(got) != 2 {
		t.Fatalf("ParseIPsAnnotation: %v %v", got, err)
	}
	for s, want := range map[string]string{
		"192.0.2.5, 192.0.2.6": `"192.0.2.5" and "192.0.2.6" are both IPv4`,
		"192.0.2.5,,":          "empty entry",
		"192.0.2.500":          `"192.0.2.500" is not an IP address`,
		"::ffff:192.0.2.5":     "write 192.0.2.5",
	} {
		if _, err := ParseIPsAnnotation(s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseIPsAnnotation(%q) = %v, want error containing %q", s, err, want)
		}
	}
	if got := ParsePoolsAnnotation(" blue, ,green,blue "); !slices.Equal(got, []string{"blue", "green"}) {
		t.Errorf("ParsePoolsAnnotation = %q", got)
	}
}

func FuzzParseCIDRBlock(f *testing.F) {
	for _, s := range []string{"192.0.2.0/24", "192.0.2.5/24", "0.0.0.0/0", "2001:db8::/64", "::/0", "::ffff:1.2.3.0/120", "1.2.3.4/32", "x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b, err := ParseCIDRBlock(s)
		if err != nil {
			return
		}
		if validateBlock(b) != "" || b.Last.Less(b.First) || !b.FromCIDR {
			t.Fatalf("%q: inconsistent block %+v", s, b)
		}
		again, err := ParseCIDRBlock(netip.PrefixFrom(b.First, b.Bits).String())
		if err != nil || again != b {
			t.Fatalf("%q: round trip %+v -> %+v (%v)", s, b, again, err)
		}
	})
}

func FuzzParseRangeBlock(f *testing.F) {
	f.Add("192.0.2.1", "192.0.2.9")
	f.Add("2001:db8::9", "2001:db8::1")
	f.Add("192.0.2.1", "2001:db8::1")
	f.Add(" ::1 ", "::1")
	f.Add("fe80::1%eth0", "fe80::2")
	f.Fuzz(func(t *testing.T, start, stop string) {
		b, err := ParseRangeBlock(start, stop)
		if err != nil {
			return
		}
		if b.FromCIDR || validateBlock(b) != "" {
			t.Fatalf("%q-%q: inconsistent block %+v", start, stop, b)
		}
		again, err := ParseRangeBlock(b.First.String(), b.Last.String())
		if err != nil || again != b {
			t.Fatalf("round trip %+v -> %+v (%v)", b, again, err)
		}
	})
}

func FuzzParseIPsAnnotation(f *testing.F) {
	for _, s := range []string{"192.0.2.5", "192.0.2.5, 2001:db8::5", "1.1.1.1,2.2.2.2", ",", " ", "::ffff:1.2.3.4", "fe80::1%lo"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		addrs, err := ParseIPsAnnotation(s)
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error")
			}
			return
		}
		if len(addrs) > 2 || (len(addrs) == 2 && FamilyOf(addrs[0]) == FamilyOf(addrs[1])) {
			t.Fatalf("%q: %v has two of one family", s, addrs)
		}
		var parts []string
		for _, a := range addrs {
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("%q: bad address %v", s, a)
			}
			parts = append(parts, a.String())
		}
		again, err := ParseIPsAnnotation(strings.Join(parts, ", "))
		if err != nil || !slices.Equal(again, addrs) {
			t.Fatalf("%q: round trip %v -> %v (%v)", s, addrs, again, err)
		}
	})
}

func FuzzParsePoolsAnnotation(f *testing.F) {
	for _, s := range []string{"blue", " blue , green ,blue", ",,", "", "a,\tb"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		names := ParsePoolsAnnotation(s)
		for i, n := range names {
			if n == "" || n != strings.TrimSpace(n) || strings.Contains(n, ",") || slices.Contains(names[:i], n) {
				t.Fatalf("%q: bad name %q in %q", s, n, names)
			}
		}
		if again := ParsePoolsAnnotation(strings.Join(names, ",")); !slices.Equal(again, names) {
			t.Fatalf("%q: round trip %q -> %q", s, names, again)
		}
	})
}
