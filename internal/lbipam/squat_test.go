package lbipam

import (
	"fmt"
	"testing"
)

// Issue 19 item 4: a request reserves a pool's address only when the pool
// serves the requesting Service and the request is valid. Otherwise a
// tenant could squat on another tenant's pool by naming its addresses.
//
// Each case builds a two-address pool, lets the squatters ask for both
// addresses first (they must stay pending with squatReason), then asks for
// an automatic address for the victim, which must get the first one. The
// controls are requests that DO reserve: the victim then waits.
func TestRequestsReserveOnlyWhatTheyMayGet(t *testing.T) {
	tenantA := func(t *testing.T, edit func(*Pool)) []Pool {
		p := mkPool("tenant-a", 0, rng(t, "192.0.2.10", "192.0.2.11"))
		edit(&p)
		return []Pool{p}
	}
	byNamespace := func(p *Pool) { p.Namespaces = []string{"tenant-a"} }
	bySelector := func(p *Pool) { p.NamespaceSelector = labelSel{"tenant": "a"} }
	byService := func(p *Pool) { p.ServiceSelector = labelSel{"team": "a"} }
	manual := func(p *Pool) { byNamespace(p); p.ManualOnly = true }
	svcIn := func(ns, name string, edit func(*Service)) Service {
		s := v4svc(ns, name)
		s.NamespaceLabels = map[string]string{"tenant": ns[len(ns)-1:]}
		s.Labels = map[string]string{"team": "b"}
		if edit != nil {
			edit(&s)
		}
		return s
	}
	asks := func(addrs ...string) func(*Service) { return func(s *Service) { s.Requested = ips(addrs...) } }
	two := func(ns string, edit func(*Service)) []Service {
		var out []Service
		for i, addr := range []string{"192.0.2.10", "192.0.2.11"} {
			s := svcIn(ns, fmt.Sprintf("squat-%d", i), asks(addr))
			if edit != nil {
				edit(&s)
			}
			out = append(out, s)
		}
		return out
	}
	victimA := svcIn("tenant-a", "web", nil)
	teamA := svcIn("shared", "web", func(s *Service) { s.Labels = map[string]string{"team": "a"} })
	for _, tc := range []struct {
		name        string
		edit        func(*Pool)
		squatters   []Service
		squatReason Reason // "" : the squatter gets its address (a control)
		victim      Service
		want        string // the victim's address, "" for pending
	}{
		{name: "namespaces list", edit: byNamespace, squatters: two("tenant-b", nil),
			squatReason: ReasonRequestedNotAllowed, victim: victimA, want: "192.0.2.10"},
		{name: "namespace selector", edit: bySelector, squatters: two("tenant-b", nil),
			squatReason: ReasonRequestedNotAllowed, victim: victimA, want: "192.0.2.10"},
		{name: "service selector", edit: byService, squatters: two("shared", nil),
			squatReason: ReasonRequestedNotAllowed, victim: teamA, want: "192.0.2.10"},
		{name: "autoAssign false, the victim names the pool", edit: manual, squatters: two("tenant-b", nil),
			squatReason: ReasonRequestedNotAllowed,
			victim:      svcIn("tenant-a", "web", func(s *Service) { s.Pools = []string{"tenant-a"} }), want: "192.0.2.10"},
		{name: "sharing key of the victim", edit: byNamespace,
			squatters: two("tenant-b", func(s *Service) {
				s.SharingKey, s.SharingNamespaces, s.Ports = "edge", []string{"*"}, tcp(53)
			}),
			squatReason: ReasonRequestedNotAllowed,
			victim: svcIn("tenant-a", "web", func(s *Service) {
				s.SharingKey, s.SharingNamespaces, s.Ports = "edge", []string{"*"}, tcp(80)
			}), want: "192.0.2.10"},
		{name: "the squatter names another pool", edit: func(*Pool) {},
			squatters:   two("tenant-b", func(s *Service) { s.Pools = []string{"elsewhere"} }),
			squatReason: ReasonRequestedNotAllowed, victim: victimA, want: "192.0.2.10"},
		{name: "invalid request in a pool that serves it", edit: byNamespace,
			squatters: []Service{
				svcIn("tenant-a", "squat-0", asks("192.0.2.10", "192.0.2.11")),
				svcIn("tenant-a", "squat-1", func(s *Service) { s.Requested = ips("192.0.2.11", "2001:db8::1") }),
			},
			squatReason: ReasonInvalidRequest, victim: victimA, want: "192.0.2.10"},
		// Controls: requests the pool serves keep their address.
		{name: "control: same tenant requests both", edit: byNamespace, squatters: two("tenant-a", nil),
			victim: victimA},
		{name: "control: the pool selects the squatter too", edit: bySelector,
			squatters: two("tenant-a", func(s *Service) {
				s.Key.Namespace = "tenant-other"
				s.NamespaceLabels = map[string]string{"tenant": "a"}
			}),
			victim: victimA},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pools := func(t *testing.T) []Pool { return tenantA(t, tc.edit) }
			for _, victimFirst := range []bool{false, true} {
				a := NewAllocator()
				a.SetPools(pools(t))
				order := append([]Service{}, tc.squatters...)
				if victimFirst {
					// The squatters are known (imported, as at start-up) before
					// the victim is looked at; their Assign comes after.
					for _, s := range order {
						a.Import(s)
					}
				} else {
					for _, s := range order {
						checkSquatter(t, a, s, tc.squatReason)
					}
				}
				got := a.Assign(tc.victim)
				want := tc.want
				if tc.squatReason == "" {
					want = "" // controls: both addresses are the squatters'
				}
				if addrsString(got) != want {
					t.Fatalf("victim first=%v: victim got %q %+v, want %q", victimFirst, addrsString(got), got.Pending, want)
				}
				if want == "" && (len(got.Pending) != 1 || got.Pending[0].Reason != ReasonPoolExhausted) {
					t.Fatalf("control: victim pending %+v, want PoolExhausted", got.Pending)
				}
				if victimFirst {
					for _, s := range order {
						checkSquatter(t, a, s, tc.squatReason)
					}
				}
			}
		})
	}
}

// checkSquatter assigns s: with reason "" it must get what it asked for,
// else stay pending with reason and get nothing.
func checkSquatter(t *testing.T, a *Allocator, s Service, reason Reason) {
	t.Helper()
	res := a.Assign(s)
	if reason == "" {
		if len(res.Addrs) != 1 || res.Addrs[0] != s.Requested[0] {
			t.Fatalf("%s: got %+v, want its request %s", s.Key, res, s.Requested[0])
		}
		return
	}
	if len(res.Addrs) != 0 || len(res.Pending) == 0 || res.Pending[0].Reason != reason {
		t.Fatalf("%s: got %q pending %+v, want nothing and %s", s.Key, addrsString(res), res.Pending, reason)
	}
	checkMessages(t, s, res)
}

// A request that starts to count (the pool now serves its namespace) keeps
// the address from automatic allocation again; one the pool stops serving
// frees it. The index follows the pools without re-importing Services.
func TestRequestReservationFollowsThePool(t *testing.T) {
	p := mkPool("p", 0, rng(t, "192.0.2.10", "192.0.2.10"))
	p.Namespaces = []string{"a"}
	a := NewAllocator()
	a.SetPools([]Pool{p})
	squat := with(v4svc("b", "squat"), func(s *Service) { s.Requested = ips("192.0.2.10") })
	a.Assign(squat)
	p.Namespaces = []string{"a", "b"}
	a.SetPools([]Pool{p})
	if r := a.Assign(v4svc("a", "auto")); len(r.Addrs) != 0 {
		t.Fatalf("a served request must reserve: auto got %s", addrsString(r))
	}
	p.Namespaces = []string{"a"}
	a.SetPools([]Pool{p})
	if got := addrsString(a.Assign(v4svc("a", "auto"))); got != "192.0.2.10" {
		t.Fatalf("an unserved request must not reserve: auto got %q", got)
	}
}

// Issue 19 item 10: a Service joining its sharing key's addresses gets the
// same one whatever order the holders were seen in (map order, restarts):
// the lowest-ranked pool's lowest address it may join.
func TestJoinSharedIsDeterministic(t *testing.T) {
	first := mkPool("first", 1, cidr(t, "192.0.2.0/24"))
	first.Priority = ptr(int32(0))
	second := mkPool("second", 0, cidr(t, "198.51.100.0/24"))
	second.Priority = ptr(int32(1))
	holder := func(name, addr string, port int32) Service {
		return with(v4svc("ns", name), func(s *Service) {
			s.SharingKey, s.Ports, s.Held = "k", tcp(port), ips(addr)
		})
	}
	holders := []Service{
		holder("h-second", "198.51.100.5", 81), // a better address, in a worse pool
		holder("h-high", "192.0.2.9", 82),
		holder("h-low", "192.0.2.7", 83),
		holder("h-blocked", "192.0.2.3", 80), // lowest, but its port collides
		holder("h-also-low", "192.0.2.7", 84),
	}
	joiner := with(v4svc("ns", "joiner"), func(s *Service) { s.SharingKey, s.Ports = "k", tcp(80) })
	perms := permutations(len(holders))
	for _, perm := range perms {
		for range 10 { // each run sees other map orders
			a := NewAllocator()
			a.SetPools([]Pool{second, first})
			for _, i := range perm {
				a.Import(holders[i])
			}
			if got := addrsString(a.Assign(joiner)); got != "192.0.2.7" {
				t.Fatalf("import order %v: joined %q, want 192.0.2.7", perm, got)
			}
		}
	}
}

func permutations(n int) [][]int {
	if n == 0 {
		return [][]int{{}}
	}
	var out [][]int
	for _, p := range permutations(n - 1) {
		for i := 0; i <= len(p); i++ {
			q := append(append(append([]int{}, p[:i]...), n-1), p[i:]...)
			out = append(out, q)
		}
	}
	return out
}
