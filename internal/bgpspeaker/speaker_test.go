package bgpspeaker

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/mooringlb/mooring/internal/bgp"
)

// TestDiffRoutes cross-checks the sorted-merge diff against maps: new
// and changed routes (attributes, or a next hop the session's hops give
// differently) are added, routes gone withdrawn, with the next hops
// they have and had.
func TestDiffRoutes(t *testing.T) {
	a1, a2 := &bgp.Attrs{Communities: []uint32{1}}, &bgp.Attrs{Communities: []uint32{2}}
	hopSets := []hops{
		{own: bgp.IPv4, v6: netip.MustParseAddr("fd00::1")},
		{own: bgp.IPv4, v6: netip.MustParseAddr("fd00::2")},
		{own: bgp.IPv6, v4: netip.MustParseAddr("10.9.9.9")},
	}
	gen := func(r *rand.Rand) []bgp.Route {
		var out []bgp.Route
		for i := range 40 {
			if r.IntN(2) == 0 {
				continue
			}
			a := netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})
			if i%3 == 0 {
				a = netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 15: byte(i)})
			}
			out = append(out, bgp.Route{Prefix: netip.PrefixFrom(a, a.BitLen()), Attrs: []*bgp.Attrs{a1, a2}[r.IntN(2)]})
		}
		slices.SortFunc(out, compareRoutes)
		return out
	}
	type pathKey struct {
		p  netip.Prefix
		nh netip.Addr
	}
	keys := func(ps []Path) []pathKey {
		var out []pathKey
		for _, p := range ps {
			out = append(out, pathKey{p.Prefix, p.NextHop})
		}
		return out
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		have, want := gen(r), gen(r)
		hh, hw := hopSets[r.IntN(3)], hopSets[r.IntN(3)]
		add, del := diffRoutes(have, hh, want, hw)
		h := map[netip.Prefix]bgp.Route{}
		for _, rt := range have {
			h[rt.Prefix] = rt
		}
		w := map[netip.Prefix]bool{}
		for _, rt := range want {
			w[rt.Prefix] = true
		}
		var wantAdd, wantDel []pathKey
		for _, rt := range want {
			if o, ok := h[rt.Prefix]; !ok || hh.of(rt.Prefix) != hw.of(rt.Prefix) || o.Attrs != rt.Attrs {
				wantAdd = append(wantAdd, pathKey{rt.Prefix, hw.of(rt.Prefix)})
			}
		}
		for _, rt := range have {
			if !w[rt.Prefix] {
				wantDel = append(wantDel, pathKey{rt.Prefix, hh.of(rt.Prefix)})
			}
		}
		if !slices.Equal(keys(add), wantAdd) || !slices.Equal(keys(del), wantDel) {
			t.Fatalf("diff(%v %v, %v %v) = add %v del %v; want add %v del %v", have, hh, want, hw, keys(add), keys(del), wantAdd, wantDel)
		}
		if got := without(have, del); len(got) != len(have)-len(del) {
			t.Fatalf("without: %v", got)
		}
	}
}

// recRouter records the paths announced and withdrawn; Announce fails
// while failAnnounce.
type recRouter struct {
	announced, withdrawn []Path
	failAnnounce         bool
}

func (r *recRouter) Start(context.Context, Global) error              { return nil }
func (r *recRouter) Stop(context.Context, bool) error                 { return nil }
func (r *recRouter) AddPeer(context.Context, PeerConfig, bool) error  { return nil }
func (r *recRouter) UpdatePeer(context.Context, PeerConfig) error     { return nil }
func (r *recRouter) DeletePeer(context.Context, string) error         { return nil }
func (r *recRouter) Sessions(context.Context) ([]SessionState, error) { return nil, nil }
func (r *recRouter) Withdraw(_ context.Context, _ string, ps []Path) error {
	r.withdrawn = append(r.withdrawn, ps...)
	return nil
}

func (r *recRouter) Announce(_ context.Context, _ string, ps []Path) error {
	if r.failAnnounce {
		return errors.New("announce refused")
	}
	r.announced = append(r.announced, ps...)
	return nil
}

// TestApplyHoldsTheDecisionsRoutes: the speaker keeps the decision's own
// routes as what the router holds (no array of its own per session), and
// still sends exactly the difference — also when the session's next hop
// for the other family changes, after a failed announcement, and when the
// decision's routes come unsorted (sorted in a copy, the decision's slice
// untouched).
func TestApplyHoldsTheDecisionsRoutes(t *testing.T) {
	ctx := t.Context()
	attrs := &bgp.Attrs{}
	route := func(a string) bgp.Route {
		p := netip.MustParseAddr(a)
		return bgp.Route{Prefix: netip.PrefixFrom(p, p.BitLen()), Attrs: attrs}
	}
	ses := bgp.Session{Peer: "tor", Address: netip.MustParseAddr("192.0.2.1"), PeerASN: 65000,
		Families: []bgp.Family{bgp.IPv4, bgp.IPv6}, NextHop6: netip.MustParseAddr("fd00::1")}
	node := func(s bgp.Session, routes ...bgp.Route) Desired {
		s.Routes = routes
		return Desired{Node: bgp.NodeResult{Node: "n1", ASN: 65001, RouterID: netip.MustParseAddr("192.0.2.2"), Sessions: []bgp.Session{s}}}
	}
	paths := func(ps []Path) []string {
		var out []string
		for _, p := range ps {
			out = append(out, p.Prefix.String()+" via "+p.NextHop.String())
		}
		return out
	}
	r := &recRouter{}
	s := New(r, slog.New(slog.DiscardHandler), -1)

	d := node(ses, route("10.0.0.1"), route("10.0.0.2"), route("2001:db8::1"))
	if err := s.Apply(ctx, d); err != nil {
		t.Fatal(err)
	}
	held := s.peers["tor"].routes
	if len(held) != 3 || &held[0] != &d.Node.Sessions[0].Routes[0] {
		t.Fatalf("the speaker copied the decision's routes: %v", held)
	}
	if got := paths(r.announced); !slices.Equal(got, []string{"10.0.0.1/32 via invalid IP", "10.0.0.2/32 via invalid IP", "2001:db8::1/128 via fd00::1"}) {
		t.Fatalf("first announcement: %v", got)
	}

	// The IPv6 next hop changes: only the IPv6 route goes out again.
	r.announced = nil
	ses2 := ses
	ses2.NextHop6 = netip.MustParseAddr("fd00::2")
	if err := s.Apply(ctx, node(ses2, route("10.0.0.1"), route("10.0.0.2"), route("2001:db8::1"))); err != nil {
		t.Fatal(err)
	}
	if got := paths(r.announced); !slices.Equal(got, []string{"2001:db8::1/128 via fd00::2"}) || len(r.withdrawn) != 0 {
		t.Fatalf("after the next hop changed: announced %v, withdrew %v", got, paths(r.withdrawn))
	}

	// A withdrawal that goes through and an announcement that fails: the
	// withdrawn route is forgotten, the new one tried again next time.
	r.announced, r.failAnnounce = nil, true
	if err := s.Apply(ctx, node(ses2, route("10.0.0.1"), route("10.0.0.3"), route("2001:db8::1"))); err == nil {
		t.Fatal("a refused announcement was not reported")
	}
	if got := paths(r.withdrawn); !slices.Equal(got, []string{"10.0.0.2/32 via invalid IP"}) {
		t.Fatalf("withdrew %v", got)
	}
	r.failAnnounce, r.withdrawn = false, nil
	unsorted := []bgp.Route{route("2001:db8::1"), route("10.0.0.3"), route("10.0.0.1")}
	if err := s.Apply(ctx, node(ses2, unsorted...)); err != nil {
		t.Fatal(err)
	}
	if got := paths(r.announced); !slices.Equal(got, []string{"10.0.0.3/32 via invalid IP"}) || len(r.withdrawn) != 0 {
		t.Fatalf("after the failure: announced %v, withdrew %v", got, paths(r.withdrawn))
	}
	if unsorted[0].Prefix.Addr().Is4() {
		t.Fatal("the speaker sorted the decision's slice")
	}
}
