package podipam

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }

func pfxs(ss ...string) []netip.Prefix {
	out := make([]netip.Prefix, len(ss))
	for i, s := range ss {
		out[i] = pfx(s)
	}
	return out
}

func readyAllocator(t *testing.T, pools ...Pool) *Allocator {
	t.Helper()
	a := NewAllocator()
	a.SetPools(pools)
	a.MarkReady()
	return a
}

func mustAlloc(t *testing.T, a *Allocator, node, pool string, f Family) netip.Prefix {
	t.Helper()
	b, err := a.Allocate(node, pool, f)
	if err != nil {
		t.Fatalf("Allocate(%s, %s, %s): %v", node, pool, f, err)
	}
	return b.Prefix
}

func TestAllocateCutsLowestFreeBlockPerFamily(t *testing.T) {
	a := readyAllocator(t, Pool{Name: "default",
		V4: FamilySpec{CIDRs: pfxs("10.244.0.0/24", "10.245.0.0/25"), MaskSize: 26},
		V6: FamilySpec{CIDRs: pfxs("fd00::/112"), MaskSize: 120}})
	want := []struct {
		node string
		f    Family
		want string
	}{
		{"n1", IPv4, "10.244.0.0/26"},
		{"n1", IPv6, "fd00::/120"},
		{"n2", IPv4, "10.244.0.64/26"},
		{"n2", IPv6, "fd00::100/120"},
		{"n3", IPv4, "10.244.0.128/26"},
		{"n4", IPv4, "10.244.0.192/26"},
		{"n5", IPv4, "10.245.0.0/26"}, // the first CIDR is full: the next one
		{"n6", IPv4, "10.245.0.64/26"},
	}
	for _, w := range want {
		if got := mustAlloc(t, a, w.node, "default", w.f); got != pfx(w.want) {
			t.Fatalf("%s %s: got %s, want %s", w.node, w.f, got, w.want)
		}
	}
	_, err := a.Allocate("n7", "default", IPv4)
	if !errors.Is(err, ErrExhausted) || !strings.Contains(err.Error(), `pool "default"`) || !strings.Contains(err.Error(), "add a CIDR") {
		t.Fatalf("exhausted pool: got %v", err)
	}
	// A released block is cut again, lowest first.
	if _, err := a.Release(pfx("10.244.0.64/26")); err != nil {
		t.Fatal(err)
	}
	if got := mustAlloc(t, a, "n7", "default", IPv4); got != pfx("10.244.0.64/26") {
		t.Fatalf("after release got %s", got)
	}
}

func TestAllocateErrors(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{
		{Name: "v4only", Order: 1, V4: FamilySpec{CIDRs: pfxs("10.0.0.0/16"), MaskSize: 24}},
		{Name: "newer", Order: 2, V4: FamilySpec{CIDRs: pfxs("10.0.128.0/17"), MaskSize: 24}},
		{Name: "badmask", Order: 3, V4: FamilySpec{CIDRs: pfxs("10.9.0.0/16"), MaskSize: 8}},
	})
	if _, err := a.Allocate("n", "v4only", IPv4); !errors.Is(err, ErrNotReady) {
		t.Fatalf("before MarkReady: %v", err)
	}
	a.MarkReady()
	for _, tc := range []struct {
		pool string
		f    Family
		want error
		text string
	}{
		{"nope", IPv4, ErrUnknownPool, "create it"},
		{"v4only", IPv6, ErrNoFamily, "spec.ipv6.cidrs"},
		{"newer", IPv4, ErrConflicting, `"v4only"`},
		{"badmask", IPv4, ErrInvalidPool, "between /16 and /32"},
	} {
		_, err := a.Allocate("n", tc.pool, tc.f)
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.text) {
			t.Errorf("%s/%s: got %v, want %v containing %q", tc.pool, tc.f, err, tc.want, tc.text)
		}
	}
}

func TestOverlapNewestLosesWhateverTheInputOrder(t *testing.T) {
	old := Pool{Name: "zeta", Order: 1, V4: FamilySpec{CIDRs: pfxs("10.250.0.0/16"), MaskSize: 26}}
	newer := Pool{Name: "alpha", Order: 2, V4: FamilySpec{CIDRs: pfxs("10.250.64.0/18"), MaskSize: 26}}
	other := Pool{Name: "other", Order: 3, V6: FamilySpec{CIDRs: pfxs("fd00::/64"), MaskSize: 120}}
	for _, order := range [][]Pool{{old, newer, other}, {newer, other, old}, {other, newer, old}} {
		a := readyAllocator(t, order...)
		st := map[string]PoolStatus{}
		for _, s := range a.Status() {
			st[s.Name] = s
		}
		if st["alpha"].ConflictsWith != "zeta" || st["zeta"].ConflictsWith != "" || st["other"].ConflictsWith != "" {
			t.Fatalf("conflicts: %+v", st)
		}
	}
}

func TestImportBeforeReadyAndOverlaps(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{{Name: "default", V4: FamilySpec{CIDRs: pfxs("10.0.0.0/24"), MaskSize: 26}}})
	if err := a.Import(Block{pfx("10.0.0.0/26"), "default", "n1"}); err != nil {
		t.Fatal(err)
	}
	if err := a.Import(Block{pfx("10.0.0.0/26"), "default", "n1"}); err != nil {
		t.Fatalf("re-import of the same block: %v", err)
	}
	if err := a.Import(Block{pfx("10.0.0.0/27"), "default", "n2"}); !errors.Is(err, ErrOverlap) {
		t.Fatalf("overlapping import: %v", err)
	}
	if err := a.Import(Block{pfx("10.0.0.128/25"), "default", "n3"}); err != nil { // an older, larger mask size
		t.Fatal(err)
	}
	if err := a.Import(Block{pfx("10.0.0.5/26"), "default", "n4"}); !errors.Is(err, ErrInvalidPool) {
		t.Fatalf("unmasked import: %v", err)
	}
	a.MarkReady()
	if got := mustAlloc(t, a, "n5", "default", IPv4); got != pfx("10.0.0.64/26") {
		t.Fatalf("got %s", got)
	}
	if _, err := a.Allocate("n6", "default", IPv4); !errors.Is(err, ErrExhausted) {
		t.Fatalf("want exhausted, got %v", err)
	}
}

func TestRemovedCIDRStaysReservedAndDraining(t *testing.T) {
	p := Pool{Name: "default", V4: FamilySpec{CIDRs: pfxs("10.0.0.0/24", "10.1.0.0/24"), MaskSize: 25}}
	a := readyAllocator(t, p)
	mustAlloc(t, a, "n1", "default", IPv4) // 10.0.0.0/25
	p.V4.CIDRs = pfxs("10.1.0.0/24")
	a.SetPools([]Pool{p, {Name: "late", Order: 5, V4: FamilySpec{CIDRs: pfxs("10.0.0.0/24"), MaskSize: 25}}})
	st := a.Status()
	if len(st) != 2 || len(st[0].Draining) != 1 || st[0].Draining[0].Node != "n1" {
		t.Fatalf("status %+v", st)
	}
	// A new pool over the removed CIDR never gets the held block.
	if got := mustAlloc(t, a, "n2", "late", IPv4); got != pfx("10.0.0.128/25") {
		t.Fatalf("got %s", got)
	}
	if _, err := a.Release(pfx("10.0.0.0/25")); err != nil {
		t.Fatal(err)
	}
	if st := a.Status(); len(st[0].Draining) != 0 {
		t.Fatalf("still draining: %+v", st[0])
	}
}

func TestStatusCounts(t *testing.T) {
	a := readyAllocator(t, Pool{Name: "default",
		V4: FamilySpec{CIDRs: pfxs("10.0.0.0/16"), MaskSize: 24},
		V6: FamilySpec{CIDRs: pfxs("fd00::/48"), MaskSize: 120}})
	mustAlloc(t, a, "n1", "default", IPv4)
	mustAlloc(t, a, "n1", "default", IPv6)
	mustAlloc(t, a, "n2", "default", IPv4)
	s := a.Status()[0]
	if s.V4 != (FamilyStatus{Blocks: 2, Capacity: 256, Addresses: 2 * 254}) || s.V6.Blocks != 1 || s.V6.Capacity != 1<<62 || s.V6.Addresses != 255 || s.Nodes != 2 {
		t.Fatalf("status %+v", s)
	}
	if got := a.ReleaseNode("n1"); len(got) != 2 {
		t.Fatalf("ReleaseNode: %v", got)
	}
	if got := a.Blocks(""); len(got) != 1 || got[0].Node != "n2" {
		t.Fatalf("blocks: %v", got)
	}
}

func TestSatisfyCutsOnlyWhatIsMissing(t *testing.T) {
	a := readyAllocator(t, Pool{Name: "tenant-a", V4: FamilySpec{CIDRs: pfxs("10.250.0.0/16"), MaskSize: 26}})
	cut, err := a.Satisfy("n1", "tenant-a", IPv4, 8)
	if err != nil || len(cut) != 1 {
		t.Fatalf("first: %v %v", cut, err)
	}
	if cut, _ := a.Satisfy("n1", "tenant-a", IPv4, 62); len(cut) != 0 {
		t.Fatalf("62 fit one /26: %v", cut)
	}
	if cut, _ := a.Satisfy("n1", "tenant-a", IPv4, 70+8); len(cut) != 1 || cut[0].Prefix != pfx("10.250.0.64/26") {
		t.Fatalf("70 pods: %v", cut)
	}
	if cut, _ := a.Satisfy("n1", "tenant-a", IPv4, 0); len(cut) != 0 {
		t.Fatal("no demand cut a block")
	}
}

func TestDemandReleasesAfterGrace(t *testing.T) {
	t0 := time.Unix(1000, 0)
	d := &Demand{PreAllocate: 8, Grace: time.Minute}
	b1, b2 := pfx("10.250.0.0/26"), pfx("10.250.0.64/26")
	// 70 pods: 62 + 8 → needs 78.
	p := d.Decide(t0, []BlockUse{{b1, 62}, {b2, 8}}, 0, false)
	if p.Needed != 78 || len(p.Release) != 0 {
		t.Fatalf("70 pods: %+v", p)
	}
	// Pods gone: nothing needed, but nothing released before the grace.
	if p := d.Decide(t0.Add(time.Second), []BlockUse{{b1, 0}, {b2, 0}}, 0, false); p.Needed != 0 || len(p.Release) != 0 {
		t.Fatalf("within grace: %+v", p)
	}
	if p := d.Decide(t0.Add(time.Minute), []BlockUse{{b1, 0}, {b2, 0}}, 0, false); len(p.Release) != 0 {
		t.Fatalf("grace counts from the first empty sighting: %+v", p)
	}
	p = d.Decide(t0.Add(time.Minute+time.Second), []BlockUse{{b1, 0}, {b2, 0}}, 0, false)
	if len(p.Release) != 2 || p.Release[0] != b2 {
		t.Fatalf("after grace: %+v", p)
	}
	// A kept pool keeps enough blocks for its pre-allocation.
	d2 := &Demand{PreAllocate: 8, Grace: 0}
	p = d2.Decide(t0, []BlockUse{{b1, 0}, {b2, 0}}, 0, true)
	if p.Needed != 8 || len(p.Release) != 1 || p.Release[0] != b2 {
		t.Fatalf("kept: %+v", p)
	}
	// A block used again restarts its grace.
	d3 := &Demand{Grace: time.Minute}
	d3.Decide(t0, []BlockUse{{b1, 0}}, 0, false)
	d3.Decide(t0.Add(30*time.Second), []BlockUse{{b1, 1}}, 0, false)
	if p := d3.Decide(t0.Add(70*time.Second), []BlockUse{{b1, 0}}, 0, false); len(p.Release) != 0 {
		t.Fatalf("grace not restarted: %+v", p)
	}
	// Pending requests count as need.
	if p := d3.Decide(t0, nil, 3, false); p.Needed != 3 {
		t.Fatalf("pending: %+v", p)
	}
}

func TestPoolValidate(t *testing.T) {
	for _, tc := range []struct {
		p    Pool
		want string
	}{
		{Pool{V4: FamilySpec{CIDRs: pfxs("fd00::/64"), MaskSize: 120}}, "move it to the other family"},
		{Pool{V4: FamilySpec{CIDRs: pfxs("10.0.0.1/24"), MaskSize: 26}}, "write 10.0.0.0/24"},
		{Pool{V4: FamilySpec{CIDRs: pfxs("10.0.0.0/24"), MaskSize: 33}}, "between /24 and /32"},
		{Pool{V4: FamilySpec{CIDRs: pfxs("10.0.0.0/24", "10.0.0.128/25"), MaskSize: 26}}, "in the same pool"},
		{Pool{V6: FamilySpec{CIDRs: pfxs("fd00::/64"), MaskSize: 120}}, ""},
	} {
		err := tc.p.Validate()
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: got %v, want %q", tc.p, err, tc.want)
		}
	}
}

func TestPrefixHelpers(t *testing.T) {
	if a, ok := alignUp(netip.MustParseAddr("10.0.0.65"), 26); !ok || a.String() != "10.0.0.128" {
		t.Errorf("alignUp: %s", a)
	}
	if _, ok := alignUp(netip.MustParseAddr("255.255.255.255"), 24); ok {
		t.Error("alignUp past the end of IPv4")
	}
	if Usable(pfx("10.0.0.0/26")) != 62 || Usable(pfx("fd00::/120")) != 255 || Usable(pfx("10.0.0.0/32")) != 1 {
		t.Error("Usable")
	}
}
