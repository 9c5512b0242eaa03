package lbipam

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestSharing(t *testing.T) {
	pools := []Pool{mkPool("p", 0, cidr(t, "192.0.2.0/29"))}
	shared := func(ns, name string, cross bool, ports ...int32) Service {
		s := v4svc(ns, name)
		s.SharingKey, s.Ports = "k", tcp(ports...)
		if cross {
			s.SharingNamespaces = []string{"*"}
		}
		return s
	}
	local := func(s Service, sel string) Service { s.SharingBackend = sel; return s }
	onlyNS := func(s Service, ns ...string) Service { s.SharingNamespaces = ns; return s }
	// want: "shared" (one address), "own" (separate addresses) or
	// "conflict" (same key, cannot share: the second stays pending).
	for _, tt := range []struct {
		name   string
		first  Service
		second Service
		want   string
	}{
		{"ports differ", shared("a", "x", false, 80), shared("a", "y", false, 443), "shared"},
		{"ports collide", shared("a", "x", false, 80), shared("a", "y", false, 80), "conflict"},
		{"udp and tcp on one port", shared("a", "x", false, 53), with(shared("a", "y", false), func(s *Service) { s.Ports = []Port{{"UDP", 53}} }), "shared"},
		{"cross namespace, one side opts in", shared("a", "x", true, 80), shared("b", "y", false, 443), "conflict"},
		{"cross namespace, both opt in", shared("a", "x", true, 80), shared("b", "y", true, 443), "shared"},
		{"cross namespace, listed by name", onlyNS(shared("a", "x", false, 80), "b"), onlyNS(shared("b", "y", false, 443), "a"), "shared"},
		{"cross namespace, other namespace listed", onlyNS(shared("a", "x", false, 80), "c"), onlyNS(shared("b", "y", false, 443), "a"), "conflict"},
		{"eTP Local, same selector", local(shared("a", "x", false, 80), "app=web"), local(shared("a", "y", false, 443), "app=web"), "shared"},
		{"eTP Local and Cluster", local(shared("a", "x", false, 80), "app=web"), shared("a", "y", false, 443), "conflict"},
		{"different keys", shared("a", "x", false, 80), with(shared("a", "y", false, 443), func(s *Service) { s.SharingKey = "other" }), "own"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a := NewAllocator()
			a.SetPools(pools)
			r1, r2 := a.Assign(tt.first), a.Assign(tt.second)
			got := "own"
			switch {
			case len(r2.Addrs) == 0 && len(r2.Pending) == 1 && r2.Pending[0].Reason == ReasonSharingConflict:
				got = "conflict"
				if !strings.Contains(r2.Pending[0].Message, `"`+tt.first.Key.String()+`"`) {
					t.Errorf("message does not name the holder: %s", r2.Pending[0].Message)
				}
			case len(r2.Addrs) == 1 && r1.Addrs[0] == r2.Addrs[0]:
				got = "shared"
			case len(r2.Addrs) != 1:
				t.Fatalf("second: %+v", r2)
			}
			if got != tt.want {
				t.Fatalf("got %s, want %s (%v, %+v)", got, tt.want, r1.Addrs, r2)
			}
			same := tt.want == "shared"
			// Requesting the first one's address explicitly gives the matching verdict.
			req := with(tt.second, func(s *Service) {
				s.Key.Name, s.Requested, s.Ports = "z", r1.Addrs, nil
				for _, p := range tt.second.Ports {
					if same { // stay compatible with both holders
						p.Port += 1000
					}
					s.Ports = append(s.Ports, p)
				}
			})
			r3 := a.Assign(req)
			if (len(r3.Pending) == 0) != same {
				t.Fatalf("explicit request: %+v", r3)
			}
			if !same && r3.Pending[0].Reason != ReasonSharingConflict && r3.Pending[0].Reason != ReasonRequestedInUse {
				t.Fatalf("reason %s", r3.Pending[0].Reason)
			}
		})
	}
}

func TestImportAdoptsForeignAddress(t *testing.T) {
	// Another controller (e.g. MetalLB) wrote 192.0.2.77; the pool agrees on
	// that address only by accident. Import and Assign keep it as it is.
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("p", 0, cidr(t, "192.0.2.0/24"))})
	s := with(v4svc("ns", "gw"), func(s *Service) { s.Held = ips("192.0.2.77") })
	if r := a.Import(s); addrsString(r) != "192.0.2.77" || len(r.Warnings) != 0 || r.Pools[0] != "p" {
		t.Fatalf("import: %+v", r)
	}
	if r := a.Assign(s); addrsString(r) != "192.0.2.77" || len(r.Pending) != 0 {
		t.Fatalf("assign: %+v", r)
	}
	if got := a.Reports()[0].IPv4; got.Used.Int64() != 1 || got.Total.Int64() != 254 || got.Free.Int64() != 253 {
		t.Fatalf("usage %+v", got)
	}
	// A new Service never gets the imported address.
	if r := a.Assign(v4svc("ns", "new")); addrsString(r) != "192.0.2.1" {
		t.Fatalf("new: %+v", r)
	}
	// A single /32 pool makes the pinned answer the only possible one.
	b := NewAllocator()
	b.SetPools([]Pool{mkPool("pin", 0, cidr(t, "192.0.2.77/32"))})
	if r := b.Assign(v4svc("ns", "gw")); addrsString(r) != "192.0.2.77" {
		t.Fatalf("/32 pin: %+v", r)
	}
}

func TestPoolEdits(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("p", 0, cidr(t, "192.0.2.0/24"))})
	var held []Service
	for _, n := range []string{"a", "b", "c"} {
		s := v4svc("ns", n)
		s.Held = a.Assign(s).Addrs
		held = append(held, s)
	}
	// Shrink the pool to .1-.2: ns/c keeps .3 (warning), nothing new fits.
	a.SetPools([]Pool{mkPool("p", 0, rng(t, "192.0.2.1", "192.0.2.2"))})
	if r := a.Assign(held[2]); addrsString(r) != "192.0.2.3" || reasons(r.Warnings) != "HeldOutsidePools" {
		t.Fatalf("shrunk: %+v", r)
	}
	if r := a.Assign(v4svc("ns", "d")); reasons(r.Pending) != "PoolExhausted" {
		t.Fatalf("shrunk, new: %+v", r)
	}
	// Disable it: held addresses stay, nothing new.
	p := mkPool("p", 0, cidr(t, "192.0.2.0/24"))
	p.Disabled = true
	a.SetPools([]Pool{p})
	for _, s := range held {
		if r := a.Assign(s); !reflect.DeepEqual(r.Addrs, s.Held) || len(r.Pending)+len(r.Warnings) != 0 {
			t.Fatalf("disabled, held: %+v", r)
		}
	}
	if r := a.Assign(v4svc("ns", "d")); reasons(r.Pending) != "NoPoolMatches" || !strings.Contains(r.Pending[0].Message, "disabled") {
		t.Fatalf("disabled, new: %+v", r)
	}
	// Delete every pool: still held.
	a.SetPools(nil)
	if r := a.Assign(held[0]); addrsString(r) != "192.0.2.1" || reasons(r.Warnings) != "HeldOutsidePools" {
		t.Fatalf("deleted: %+v", r)
	}
}

func TestConflictsAndInvalid(t *testing.T) {
	old := mkPool("old", 0, cidr(t, "10.0.0.0/24"))
	newer := mkPool("newer", 5, cidr(t, "10.0.0.128/25"), cidr(t, "10.0.1.0/30"))
	newer.Priority = ptr(int32(1)) // priority does not let a newer pool win an overlap
	bad := mkPool("bad", 1,
		cidr(t, "10.9.0.0/30"),
		rng(t, "10.9.0.2", "10.9.0.9"), // overlaps block 1
		Block{First: ip("2001:db8::9"), Last: ip("2001:db8::1")},
		Block{First: ip("10.8.0.5"), Last: ip("10.8.0.255"), FromCIDR: true, Bits: 24})
	a := NewAllocator()
	reps := a.SetPools([]Pool{newer, old, bad})
	if names := []string{reps[0].Name, reps[1].Name, reps[2].Name}; !reflect.DeepEqual(names, []string{"bad", "newer", "old"}) {
		t.Fatalf("report order %v", names)
	}
	if !reflect.DeepEqual(reps[1].ConflictsWith, []string{"old"}) || len(reps[2].ConflictsWith) != 0 {
		t.Fatalf("conflicts %+v", reps)
	}
	if len(reps[0].Invalid) != 3 {
		t.Fatalf("invalid %q", reps[0].Invalid)
	}
	for i, msg := range reps[0].Invalid {
		if !strings.HasPrefix(msg, fmt.Sprintf("spec.blocks[%d]", i+1)) || strings.Contains(msg, "ipalloc") {
			t.Errorf("invalid message %q", msg)
		}
	}
	if reps[1].IPv4.Total.Int64() != 2 || reps[0].IPv4.Total.Int64() != 2 || reps[0].IPv6.Total.Int64() != 0 {
		t.Fatalf("totals: newer %s bad %s", reps[1].IPv4.Total, reps[0].IPv4.Total)
	}
	// The newer pool hands out only from its own, non-overlapping block.
	s := v4svc("ns", "a")
	s.Pools = []string{"newer"}
	if r := a.Assign(s); addrsString(r) != "10.0.1.1" {
		t.Fatalf("newer: %+v", r)
	}
	// Duplicate pool names: the younger copy is ignored.
	reps = a.SetPools([]Pool{old, mkPool("old", 9, cidr(t, "10.7.0.0/24"))})
	if len(reps) != 2 || len(reps[1].Invalid) != 1 || reps[1].IPv4.Total.Int64() != 0 {
		t.Fatalf("duplicate names %+v", reps)
	}
}

func TestIPv6Slash64(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("v6", 0, cidr(t, "2001:db8::/64"))})
	for i := 0; i < 3; i++ {
		a.Assign(Service{Key: ServiceKey{"ns", string(rune('a' + i))}, Families: []Family{IPv6}})
	}
	u := a.Reports()[0].IPv6
	if u.Total.String() != "18446744073709551614" || u.Used.Int64() != 3 || u.Free.String() != "18446744073709551611" {
		t.Fatalf("usage %+v", u)
	}
	if got := a.Holders(ip("2001:db8::3")); len(got) != 1 || got[0].Name != "c" {
		t.Fatalf("holders %v", got)
	}
}

func TestOutsideSubnets(t *testing.T) {
	p := mkPool("p", 0, cidr(t, "192.168.1.0/24"), rng(t, "192.168.2.250", "192.168.3.9"), cidr(t, "2001:db8:1::/64"),
		Block{First: ip("10.0.0.9"), Last: ip("10.0.0.1")}) // invalid: ignored
	v6 := "2001:db8:1::-2001:db8:1:0:ffff:ffff:ffff:ffff"
	for _, tt := range []struct {
		subnets []string
		want    string
	}{
		{[]string{"192.168.0.0/23", "2001:db8:1::/48"}, "[192.168.2.250-192.168.3.9]"},
		{[]string{"192.168.1.0/24", "192.168.2.0/24", "2001:db8:1::/64"}, "[192.168.3.0-192.168.3.9]"},
		{[]string{"192.168.1.7/24"}, "[192.168.2.250-192.168.3.9 " + v6 + "]"}, // host bits ignored
		{nil, "[192.168.1.0-192.168.1.255 192.168.2.250-192.168.3.9 " + v6 + "]"},
		{[]string{"0.0.0.0/0", "::/0"}, "[]"},
	} {
		var subnets []netip.Prefix
		for _, s := range tt.subnets {
			subnets = append(subnets, netip.MustParsePrefix(s))
		}
		if got := fmt.Sprint(OutsideSubnets(p, subnets)); got != tt.want {
			t.Errorf("%v: got %s, want %s", tt.subnets, got, tt.want)
		}
	}
}
