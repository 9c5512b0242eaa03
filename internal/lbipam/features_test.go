package lbipam

import (
	"strings"
	"testing"
)

// Pool options that came with the MetalLB import: autoAssign,
// avoidBuggyIPs, namespaces, priority (lower first, unset last).
func TestPoolOptions(t *testing.T) {
	manual := func(t *testing.T) []Pool {
		p := mkPool("manual", 0, cidr(t, "192.0.2.0/29"))
		p.ManualOnly = true
		return []Pool{p}
	}
	buggy := func(t *testing.T) []Pool {
		p := mkPool("buggy", 0, rng(t, "192.0.2.255", "192.0.3.1"))
		p.AvoidBuggyIPs = true
		return []Pool{p}
	}
	shop := func(t *testing.T) []Pool {
		p := mkPool("shop", 0, cidr(t, "192.0.2.0/29"))
		p.Namespaces = []string{"shop"}
		return []Pool{p}
	}
	prio := func(t *testing.T) []Pool {
		none := mkPool("none", 0, cidr(t, "10.0.1.0/29")) // oldest, no priority
		five := mkPool("five", 1, cidr(t, "10.0.2.0/29"))
		five.Priority = ptr(int32(5))
		two := mkPool("two", 2, cidr(t, "10.0.3.0/29"))
		two.Priority = ptr(int32(2))
		return []Pool{none, five, two}
	}
	s := v4svc("default", "web")
	for _, sc := range []scenario{
		{name: "manual-only pool: no automatic address", pools: manual, svc: s, pending: "NoPoolMatches", msg: "autoAssign: false"},
		{name: "manual-only pool: requested address", pools: manual, svc: with(s, func(s *Service) { s.Requested = ips("192.0.2.3") }), addrs: "192.0.2.3"},
		{name: "manual-only pool: named pool", pools: manual, svc: with(s, func(s *Service) { s.Pools = []string{"manual"} }), addrs: "192.0.2.1"},
		{name: "avoid buggy: skips .255 and .0", pools: buggy, svc: s, addrs: "192.0.3.1"},
		{name: "avoid buggy: request of .0 refused", pools: buggy, svc: with(s, func(s *Service) { s.Requested = ips("192.0.3.0") }), pending: "RequestedNotAllowedByPool", msg: "avoidBuggyIPs"},
		{name: "avoid buggy: held .0 kept", pools: buggy, svc: with(s, func(s *Service) { s.Held = ips("192.0.3.0") }), addrs: "192.0.3.0"},
		{name: "namespaces: other namespace", pools: shop, svc: s, pending: "NoPoolMatches"},
		{name: "namespaces: listed namespace", pools: shop, svc: v4svc("shop", "web"), addrs: "192.0.2.1"},
		{name: "priority: lowest number first, unset last", pools: prio, svc: s, addrs: "10.0.3.1"},
		{name: "priority: unset pool when the others are full", pools: prio, before: []Service{
			with(v4svc("x", "a"), func(s *Service) { s.Held = ips("10.0.2.1", "10.0.2.2", "10.0.2.3", "10.0.2.4", "10.0.2.5", "10.0.2.6") }),
			with(v4svc("x", "b"), func(s *Service) { s.Held = ips("10.0.3.1", "10.0.3.2", "10.0.3.3", "10.0.3.4", "10.0.3.5", "10.0.3.6") }),
		}, svc: s, addrs: "10.0.1.1"},
	} {
		t.Run(sc.name, func(t *testing.T) { runScenario(t, sc) })
	}
}

func TestAvoidBuggyUsage(t *testing.T) {
	p := mkPool("p", 0, cidr(t, "192.0.2.0/23"), rng(t, "192.0.4.250", "192.0.5.5"))
	p.AvoidBuggyIPs, p.AllowFirstLastIPs = true, true
	a := NewAllocator()
	a.SetPools([]Pool{p})
	a.Import(with(v4svc("x", "held"), func(s *Service) { s.Held = ips("192.0.2.255", "192.0.2.7") }))
	rep := a.Reports()[0]
	// 512 - 4 (.0/.255 twice) + 12 - 2 = 518 addresses; the held .255 is not
	// counted as used.
	if rep.IPv4.Total.Int64() != 518 || rep.IPv4.Used.Int64() != 1 || rep.IPv4.Free.Int64() != 517 {
		t.Fatalf("usage %s/%s/%s", rep.IPv4.Total, rep.IPv4.Used, rep.IPv4.Free)
	}
}

// Issue 8 item 2: a Service that asks for an address is never beaten to it
// by one that asked for any address, whatever the order they are looked at.
func TestRequestedAddressIsNotHandedOutAutomatically(t *testing.T) {
	pool := mkPool("p", 0, cidr(t, "192.0.2.0/30"))
	a := NewAllocator()
	a.SetPools([]Pool{pool})
	want := with(v4svc("default", "want"), func(s *Service) { s.Requested = ips("192.0.2.0") })
	if r := a.Assign(want); len(r.Addrs) != 0 || r.Pending[0].Reason != ReasonRequestedNotAllowed {
		t.Fatalf("first/last excluded: %+v", r)
	}
	pool.AllowFirstLastIPs = true
	a.SetPools([]Pool{pool})
	// The automatic Service is looked at first and must skip .0.
	if got := addrsString(a.Assign(v4svc("default", "any"))); got != "192.0.2.1" {
		t.Fatalf("automatic: got %s", got)
	}
	if got := addrsString(a.Assign(want)); got != "192.0.2.0" {
		t.Fatalf("requested: got %s", got)
	}
	// Once the requester is gone its address is free for anyone.
	a.Release(want.Key)
	if got := addrsString(a.Assign(v4svc("default", "later"))); got != "192.0.2.0" {
		t.Fatalf("after release: got %s", got)
	}
}

// Issue 8 item 1: an invalid request gets no new address of any family.
func TestInvalidRequestGetsNothingNew(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("p", 0, cidr(t, "192.0.2.0/29"), cidr(t, "fd00:213::/120"))})
	s := with(v4svc("default", "v6ask"), func(s *Service) { s.Requested = ips("fd00:213::170") })
	r := a.Assign(s)
	if len(r.Addrs) != 0 || len(r.Pending) != 1 || r.Pending[0].Reason != ReasonInvalidRequest || !strings.Contains(r.Pending[0].Message, "spec.ipFamilies") {
		t.Fatalf("%+v", r)
	}
}

// A disabled pool that selects the Service is named in its reason, whatever
// else stands in the way: the operator may have disabled the pool it needs
// (`lab` disabled, a manual-only or IPv6-only or full pool beside it).
func TestReasonNamesDisabledPool(t *testing.T) {
	lab := func(t *testing.T) Pool {
		p := mkPool("lab", 0, cidr(t, "192.0.2.0/29"))
		p.Disabled = true
		return p
	}
	only := func(t *testing.T) []Pool { return []Pool{lab(t)} }
	manual := func(t *testing.T) []Pool {
		m := mkPool("reserved", 1, cidr(t, "198.51.100.0/29"))
		m.ManualOnly = true
		return []Pool{lab(t), m}
	}
	v6only := func(t *testing.T) []Pool { return []Pool{lab(t), mkPool("six", 1, cidr(t, "2001:db8::/125"))} }
	full := func(t *testing.T) []Pool { return []Pool{lab(t), mkPool("tiny", 1, cidr(t, "198.51.100.9/32"))} }
	s := v4svc("default", "web")
	for _, sc := range []scenario{
		{name: "only the disabled pool", pools: only, svc: s, pending: "NoPoolMatches", msg: `"lab"`},
		{name: "beside a manual-only pool", pools: manual, svc: s, pending: "NoPoolMatches", msg: `"lab"`},
		{name: "beside a pool of the other family", pools: v6only, svc: s, pending: "FamilyUnavailable", msg: `"lab"`},
		{name: "beside a full pool", pools: full, before: []Service{with(v4svc("x", "a"), func(s *Service) { s.Held = ips("198.51.100.9") })},
			svc: s, pending: "PoolExhausted", msg: `"lab"`},
	} {
		t.Run(sc.name, func(t *testing.T) {
			_, res := runScenario(t, sc)
			if n := strings.Count(res.Pending[0].Message, `"lab"`); n != 1 {
				t.Errorf("the disabled pool is named %d times: %s", n, res.Pending[0].Message)
			}
		})
	}
}

// A pool whose only IPv6 block is invalid (a reversed range, which
// admission cannot catch for IPv6) says so in the Service's IPv6 reason,
// instead of asking for an IPv6 block the pool seems to have.
func TestReasonNamesInvalidFamilyBlock(t *testing.T) {
	pools := func(t *testing.T) []Pool {
		p := mkPool("dual", 0, cidr(t, "192.0.2.0/29"), Block{First: ip("2001:db8::9"), Last: ip("2001:db8::1")})
		return []Pool{p}
	}
	s := Service{Key: ServiceKey{"default", "web"}, Families: []Family{IPv4, IPv6}}
	_, res := runScenario(t, scenario{pools: pools, svc: s, addrs: "192.0.2.1", pending: "FamilyUnavailable",
		msg: `pool "dual" spec.blocks[1]: start 2001:db8::9 is after stop 2001:db8::1: swap them`})
	if m := res.Pending[0].Message; strings.Contains(m, "add an IPv6 block") {
		t.Errorf("the reason asks for a block the pool has: %s", m)
	}
}
