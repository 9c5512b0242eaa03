package lbipam

import (
	"reflect"
	"strings"
	"testing"
)

// scenario: pools are set, `before` Services are imported (Held set) or
// assigned, then svc is assigned and its Result checked.
type scenario struct {
	name     string
	pools    func(t *testing.T) []Pool
	before   []Service
	svc      Service
	addrs    string // comma-separated
	pending  string // reasons, comma-separated
	warnings string
	msg      string // substring of the first pending/warning message
}

func runScenario(t *testing.T, sc scenario) (*Allocator, Result) {
	t.Helper()
	a := NewAllocator()
	a.SetPools(sc.pools(t))
	for _, b := range sc.before {
		if len(b.Held) > 0 {
			a.Import(b)
		} else {
			a.Assign(b)
		}
	}
	res := a.Assign(sc.svc)
	if got := addrsString(res); got != sc.addrs {
		t.Errorf("addrs = %q, want %q", got, sc.addrs)
	}
	if got := reasons(res.Pending); got != sc.pending {
		t.Errorf("pending = %q, want %q (%+v)", got, sc.pending, res.Pending)
	}
	if got := reasons(res.Warnings); got != sc.warnings {
		t.Errorf("warnings = %q, want %q (%+v)", got, sc.warnings, res.Warnings)
	}
	if sc.msg != "" {
		all := append(append([]Problem{}, res.Pending...), res.Warnings...)
		if len(all) == 0 || !strings.Contains(all[0].Message, sc.msg) {
			t.Errorf("message %+v does not contain %q", all, sc.msg)
		}
	}
	checkMessages(t, sc.svc, res)
	again := a.Assign(sc.svc)
	if !reflect.DeepEqual(res, again) {
		t.Errorf("Assign is not idempotent:\n%+v\n%+v", res, again)
	}
	return a, res
}

func with(s Service, f func(*Service)) Service { f(&s); return s }

func TestReasons(t *testing.T) {
	blue := func(t *testing.T) []Pool { return []Pool{mkPool("blue", 0, cidr(t, "192.0.2.0/30"))} }
	blueSel := func(t *testing.T) []Pool {
		p := mkPool("blue", 0, cidr(t, "192.0.2.0/24"))
		p.ServiceSelector = labelSel{"team": "blue"}
		return []Pool{p}
	}
	s := v4svc("default", "web")
	for _, sc := range []scenario{
		{name: "first address", pools: blue, svc: s, addrs: "192.0.2.1"},
		{name: "no pool matches", pools: blueSel, svc: s, pending: "NoPoolMatches", msg: "no pool selects"},
		{name: "selector matches", pools: blueSel, svc: with(s, func(s *Service) { s.Labels = map[string]string{"team": "blue"} }), addrs: "192.0.2.1"},
		{name: "virtual name label", pools: func(t *testing.T) []Pool {
			p := mkPool("blue", 0, cidr(t, "192.0.2.0/24"))
			p.ServiceSelector = labelSel{LabelServiceName: "web", LabelServiceNamespace: "default"}
			return []Pool{p}
		}, svc: s, addrs: "192.0.2.1"},
		{name: "namespace selector", pools: func(t *testing.T) []Pool {
			p := mkPool("blue", 0, cidr(t, "192.0.2.0/24"))
			p.NamespaceSelector = labelSel{"env": "prod"}
			return []Pool{p}
		}, svc: s, pending: "NoPoolMatches"},
		{name: "pool not found", pools: blue, svc: with(s, func(s *Service) { s.Pools = []string{"nope"} }), pending: "PoolNotFound", msg: `"nope"`},
		{name: "exhausted", pools: blue, before: []Service{v4svc("a", "1"), v4svc("a", "2")}, svc: s,
			pending: "PoolExhausted", msg: `pool "blue" (2 of 2 used) has no free IPv4 address: add a block`},
		{name: "requested outside", pools: blue, svc: with(s, func(s *Service) { s.Requested = ips("198.51.100.1") }), pending: "RequestedOutsidePools"},
		{name: "requested in use", pools: blue, before: []Service{v4svc("a", "1")}, svc: with(s, func(s *Service) { s.Requested = ips("192.0.2.1") }),
			pending: "RequestedInUse", msg: `"a/1" holds`},
		{name: "requested disabled", pools: func(t *testing.T) []Pool {
			p := blue(t)
			p[0].Disabled = true
			return p
		}, svc: with(s, func(s *Service) { s.Requested = ips("192.0.2.2") }), pending: "RequestedInDisabledPool"},
		{name: "requested first address", pools: blue, svc: with(s, func(s *Service) { s.Requested = ips("192.0.2.0") }),
			pending: "RequestedNotAllowedByPool", msg: "allowFirstLastIPs"},
		{name: "requested not selected", pools: blueSel, svc: with(s, func(s *Service) { s.Requested = ips("192.0.2.9") }),
			pending: "RequestedNotAllowedByPool"},
		{name: "requested in conflicting pool", pools: func(t *testing.T) []Pool {
			old := mkPool("old", 0, cidr(t, "10.0.0.0/24"))
			old.ServiceSelector = labelSel{"team": "x"}
			return []Pool{old, mkPool("new", 5, cidr(t, "10.0.0.128/25"))}
		}, svc: with(s, func(s *Service) { s.Requested = ips("10.0.0.200") }), pending: "RequestedInConflictingPool", msg: `older pool(s) "old"`},
		{name: "sharing conflict", pools: blue,
			before:  []Service{with(v4svc("default", "a"), func(s *Service) { s.SharingKey, s.Ports = "k", tcp(80) })},
			svc:     with(s, func(s *Service) { s.SharingKey, s.Ports, s.Requested = "k", tcp(80), ips("192.0.2.1") }),
			pending: "SharingConflict", msg: "TCP port 80"},
		{name: "family unavailable", pools: blue, svc: with(s, func(s *Service) { s.Families = []Family{IPv6} }), pending: "FamilyUnavailable"},
		{name: "two requests one family", pools: blue, svc: with(s, func(s *Service) { s.Requested = ips("192.0.2.1", "192.0.2.2") }), pending: "InvalidRequest"},
		{name: "request of a family not asked", pools: blue, svc: with(s, func(s *Service) { s.Requested = ips("2001:db8::1") }), pending: "InvalidRequest", msg: "nothing new is assigned"},
		{name: "invalid request keeps held", pools: blue, svc: with(s, func(s *Service) { s.Held, s.Requested = ips("192.0.2.2"), ips("2001:db8::1") }), addrs: "192.0.2.2", pending: "InvalidRequest"},
		{name: "held outside pools", pools: blue, svc: with(s, func(s *Service) { s.Held = ips("203.0.113.9") }),
			addrs: "203.0.113.9", warnings: "HeldOutsidePools", msg: "203.0.113.9"},
		{name: "held duplicate", pools: blue, before: []Service{with(v4svc("x", "other"), func(s *Service) { s.Held = ips("192.0.2.2") })},
			svc: with(s, func(s *Service) { s.Held = ips("192.0.2.2") }), addrs: "192.0.2.2", warnings: "HeldDuplicate"},
	} {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}

func TestFirstLastPerPrefixLength(t *testing.T) {
	for _, tt := range []struct {
		block    string
		allow    bool
		want     []string // every address handed out, in order
		lastFull bool
	}{
		{"192.0.2.0/30", false, []string{"192.0.2.1", "192.0.2.2"}, true},
		{"192.0.2.0/30", true, []string{"192.0.2.0", "192.0.2.1", "192.0.2.2", "192.0.2.3"}, true},
		{"192.0.2.4/31", false, []string{"192.0.2.4", "192.0.2.5"}, true},
		{"192.0.2.9/32", false, []string{"192.0.2.9"}, true},
		{"2001:db8::/126", false, []string{"2001:db8::1", "2001:db8::2"}, true},
		{"2001:db8::/127", false, []string{"2001:db8::", "2001:db8::1"}, true},
		{"2001:db8::5/128", false, []string{"2001:db8::5"}, true},
	} {
		a := NewAllocator()
		p := mkPool("p", 0, cidr(t, tt.block))
		p.AllowFirstLastIPs = tt.allow
		a.SetPools([]Pool{p})
		fam := FamilyOf(ip(tt.want[0]))
		for i, want := range tt.want {
			r := a.Assign(Service{Key: ServiceKey{"ns", string(rune('a' + i))}, Families: []Family{fam}})
			if addrsString(r) != want {
				t.Errorf("%s allow=%v #%d: got %q want %s", tt.block, tt.allow, i, addrsString(r), want)
			}
		}
		r := a.Assign(Service{Key: ServiceKey{"ns", "last"}, Families: []Family{fam}})
		if reasons(r.Pending) != "PoolExhausted" {
			t.Errorf("%s: after filling, pending = %v", tt.block, r.Pending)
		}
	}
	// Range blocks hand out every address, ends included.
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("r", 0, rng(t, "192.0.2.0", "192.0.2.1"))})
	if got := addrsString(a.Assign(v4svc("ns", "a"))); got != "192.0.2.0" {
		t.Errorf("range block: got %s", got)
	}
}

func TestPoolOrder(t *testing.T) {
	old := mkPool("old", 0, cidr(t, "10.0.1.0/24"))
	young := mkPool("young", 10, cidr(t, "10.0.2.0/24"))
	zz := mkPool("zz", 0, cidr(t, "10.0.4.0/24"))
	high := mkPool("high", 20, cidr(t, "10.0.3.0/24"))
	high.Priority = ptr(int32(5))
	a := NewAllocator()
	a.SetPools([]Pool{young, zz, old, high})
	if got := addrsString(a.Assign(v4svc("ns", "a"))); got != "10.0.3.1" {
		t.Fatalf("priority wins: got %s", got)
	}
	a.SetPools([]Pool{young, zz, old})
	if got := addrsString(a.Assign(v4svc("ns", "b"))); got != "10.0.1.1" {
		t.Fatalf("age, then name wins: got %s", got)
	}
	// svc.Pools restricts the choice but keeps the order.
	s := v4svc("ns", "c")
	s.Pools = []string{"young", "zz", "missing"} // annotation order does not matter: zz is older
	if got := addrsString(a.Assign(s)); got != "10.0.4.1" {
		t.Fatalf("restricted: got %s", got)
	}
	// ns/a still holds its address from the removed pool "high", with a warning.
	r := a.Assign(with(v4svc("ns", "a"), func(s *Service) { s.Held = ips("10.0.3.1") }))
	if addrsString(r) != "10.0.3.1" || reasons(r.Warnings) != "HeldOutsidePools" {
		t.Fatalf("held after pool deletion: %+v", r)
	}
}

func TestRequestedMove(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("p", 0, cidr(t, "192.0.2.0/24"))})
	a.Assign(v4svc("ns", "other")) // takes .1
	web := with(v4svc("ns", "web"), func(s *Service) { s.Held = ips("192.0.2.50"); s.Requested = ips("192.0.2.1") })
	a.Import(web)
	// The requested address is taken: keep the old one, say why.
	r := a.Assign(web)
	if addrsString(r) != "192.0.2.50" || reasons(r.Pending) != "RequestedInUse" {
		t.Fatalf("blocked move: %+v", r)
	}
	// Once it frees up, the Service moves and the old address is released.
	a.Release(ServiceKey{"ns", "other"})
	r = a.Assign(web)
	if addrsString(r) != "192.0.2.1" || len(r.Pending) != 0 || len(a.Holders(ip("192.0.2.50"))) != 0 {
		t.Fatalf("move: %+v", r)
	}
	// Requesting the address it already holds changes nothing.
	web.Held = r.Addrs
	if r2 := a.Assign(web); !reflect.DeepEqual(r, r2) {
		t.Fatalf("steady: %+v vs %+v", r, r2)
	}
}

func TestDualStack(t *testing.T) {
	v4only := []Pool{mkPool("p4", 0, cidr(t, "192.0.2.0/24"))}
	ds := func(require bool) Service {
		return Service{Key: ServiceKey{"ns", "ds"}, Families: []Family{IPv4, IPv6}, RequireAllFamilies: require}
	}
	a := NewAllocator()
	a.SetPools(v4only)
	r := a.Assign(ds(true))
	if addrsString(r) != "" || reasons(r.Pending) != "FamilyUnavailable,FamilyUnavailable" {
		t.Fatalf("require: %+v", r)
	}
	if !strings.Contains(r.Pending[0].Message, "192.0.2.1") || r.Pending[0].Family != IPv4 {
		t.Fatalf("rolled back IPv4 must be explained: %+v", r.Pending[0])
	}
	r = a.Assign(ds(false))
	if addrsString(r) != "192.0.2.1" || reasons(r.Pending) != "FamilyUnavailable" || r.Pending[0].Family != IPv6 {
		t.Fatalf("prefer: %+v", r)
	}
	// Adding an IPv6 block completes it; the IPv4 address does not move.
	a.SetPools([]Pool{mkPool("p4", 0, cidr(t, "192.0.2.0/24"), cidr(t, "2001:db8::/64"))})
	r = a.Assign(with(ds(false), func(s *Service) { s.Held = r.Addrs }))
	if addrsString(r) != "192.0.2.1,2001:db8::1" || len(r.Pending) != 0 || !reflect.DeepEqual(r.Pools, []string{"p4", "p4"}) {
		t.Fatalf("completed: %+v", r)
	}
	// Dropping IPv4 from the families releases it.
	r = a.Assign(with(ds(false), func(s *Service) { s.Held, s.Families = r.Addrs, []Family{IPv6} }))
	if addrsString(r) != "2001:db8::1" || len(a.Holders(ip("192.0.2.1"))) != 0 {
		t.Fatalf("family dropped: %+v", r)
	}
}
