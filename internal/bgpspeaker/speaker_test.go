package bgpspeaker

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"

	"github.com/mooringlb/mooring/internal/bgp"
)

// TestDiffPaths cross-checks the sorted-merge diff against maps.
func TestDiffPaths(t *testing.T) {
	a1, a2 := &bgp.Attrs{Communities: []uint32{1}}, &bgp.Attrs{Communities: []uint32{2}}
	gen := func(r *rand.Rand) []Path {
		var out []Path
		for i := range 40 {
			if r.IntN(2) == 0 {
				continue
			}
			p := Path{Route: bgp.Route{Prefix: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}), 32), Attrs: []*bgp.Attrs{a1, a2}[r.IntN(2)]}}
			if r.IntN(4) == 0 {
				p.NextHop = netip.MustParseAddr("10.9.9.9")
			}
			out = append(out, p)
		}
		return out
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		have, want := gen(r), gen(r)
		add, del := diffPaths(have, want)
		h := map[netip.Prefix]Path{}
		for _, p := range have {
			h[p.Prefix] = p
		}
		w := map[netip.Prefix]Path{}
		for _, p := range want {
			w[p.Prefix] = p
		}
		var wantAdd, wantDel []string
		for _, p := range want {
			if o, ok := h[p.Prefix]; !ok || o.NextHop != p.NextHop || o.Attrs != p.Attrs {
				wantAdd = append(wantAdd, p.Prefix.String())
			}
		}
		for _, p := range have {
			if _, ok := w[p.Prefix]; !ok {
				wantDel = append(wantDel, p.Prefix.String())
			}
		}
		names := func(ps []Path) []string {
			var out []string
			for _, p := range ps {
				out = append(out, p.Prefix.String())
			}
			return out
		}
		if !slices.Equal(names(add), wantAdd) || !slices.Equal(names(del), wantDel) {
			t.Fatalf("diff(%v, %v) = add %v del %v; want add %v del %v", names(have), names(want), names(add), names(del), wantAdd, wantDel)
		}
		if got := names(without(have, del)); len(got) != len(have)-len(del) {
			t.Fatalf("without: %v", got)
		}
	}

}
