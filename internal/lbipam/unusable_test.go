package lbipam

import (
	"net/netip"
	"strings"
	"testing"
)

// Issue 19 item 9: blocks holding addresses that can never be a Service's
// are invalid (READY False in the adapter) and hand out nothing; the other
// blocks of the pool still work.
func TestUnusableBlocksHandOutNothing(t *testing.T) {
	for _, tc := range []struct {
		block Block
		want  string // substring of the Invalid message; "" : usable
	}{
		{cidr(t, "0.0.0.0/0"), "every address of its family"},
		{cidr(t, "::/0"), "every address of its family"},
		{cidr(t, "127.0.0.0/8"), "loopback"},
		{cidr(t, "224.0.0.0/4"), "multicast"},
		{cidr(t, "fe80::/64"), "link-local"},
		{cidr(t, "0.0.0.0/8"), "this network"},
		{cidr(t, "0.0.0.0/32"), "unspecified"},
		{cidr(t, "169.254.10.0/24"), "link-local"},
		{cidr(t, "240.0.0.0/4"), "limited broadcast"},
		{cidr(t, "255.255.255.255/32"), "limited broadcast"},
		{cidr(t, "::/128"), "unspecified"},
		{cidr(t, "::1/128"), "loopback"},
		{cidr(t, "ff02::/16"), "multicast"},
		{cidr(t, "2001:db8::/47"), "larger than one /48"},
		{rng(t, "126.255.255.250", "128.0.0.1"), "loopback"},
		{rng(t, "223.255.255.0", "224.0.0.0"), "multicast"},
		{rng(t, "2001:db8:0:ffff::", "2001:db8:1::1"), "larger than one /48"},
		{rng(t, "fe7f:ffff:ffff:ffff::", "fe80::"), "link-local"},
		// Usable neighbours.
		{cidr(t, "2001:db8::/48"), ""},
		{cidr(t, "126.0.0.0/8"), ""},
		{cidr(t, "240.0.0.0/5"), ""},
		{rng(t, "169.253.255.250", "169.253.255.255"), ""},
		{rng(t, "2001:db8:0:ffff::", "2001:db8:0:ffff::ff"), ""},
	} {
		t.Run(tc.block.First.String()+"-"+tc.block.Last.String(), func(t *testing.T) {
			a := NewAllocator()
			good := cidr(t, "192.0.2.0/30")
			good.Index = 1
			rep := a.SetPools([]Pool{{Name: "p", Created: epoch, Blocks: []Block{tc.block, good}}})[0]
			if tc.want == "" {
				if len(rep.Invalid) != 0 {
					t.Fatalf("usable block refused: %v", rep.Invalid)
				}
				return
			}
			if len(rep.Invalid) != 1 || !strings.Contains(rep.Invalid[0], tc.want) ||
				!strings.Contains(rep.Invalid[0], "spec.blocks[0]") || !strings.Contains(rep.Invalid[0], ": use addresses") {
				t.Fatalf("invalid = %q, want one message naming spec.blocks[0], %q and the fix", rep.Invalid, tc.want)
			}
			fam := FamilyOf(tc.block.First)
			if u := rep.IPv4; fam == IPv4 && u.Total.Int64() != 2 {
				t.Fatalf("IPv4 total %s, want only the good block's 2", u.Total)
			}
			if u := rep.IPv6; fam == IPv6 && u.Total.Sign() != 0 {
				t.Fatalf("IPv6 total %s, want 0", u.Total)
			}
			svc := Service{Key: ServiceKey{"ns", "web"}, Families: []Family{fam}}
			res := a.Assign(svc)
			for _, addr := range res.Addrs {
				if UnusableAddr(addr) != "" || !good.First.Is4() || fam == IPv4 && !rangesContain(a.pools[0].valid[:1], addr) {
					t.Fatalf("got %s", addr)
				}
			}
			req := with(svc, func(s *Service) { s.Key.Name = "req"; s.Requested = []netip.Addr{tc.block.First} })
			if r := a.Assign(req); len(r.Addrs) != 0 {
				t.Fatalf("request of %s granted: %+v", tc.block.First, r)
			}
		})
	}
}

// A request for an unusable address says what it is.
func TestRequestOfUnusableAddressSaysWhy(t *testing.T) {
	a := NewAllocator()
	a.SetPools([]Pool{mkPool("p", 0, cidr(t, "192.0.2.0/24"))})
	res := a.Assign(with(v4svc("ns", "lo"), func(s *Service) { s.Requested = ips("127.0.0.1") }))
	if len(res.Pending) != 1 || res.Pending[0].Reason != ReasonRequestedOutside || !strings.Contains(res.Pending[0].Message, "loopback") {
		t.Fatalf("%+v", res)
	}
}

// FuzzNoUnusableAddress: whatever block a pool holds, no Service is ever
// handed an address that UnusableAddr names, automatically or by request.
func FuzzNoUnusableAddress(f *testing.F) {
	for _, s := range []string{"0.0.0.0/0", "127.0.0.0/8", "224.0.0.0/4", "fe80::/64", "::/0", "0.0.0.0/31", "255.255.255.254/31", "::/127"} {
		p := netip.MustParsePrefix(s)
		f.Add(p.Addr().AsSlice(), uint8(p.Bits()), true, []byte{1})
	}
	f.Fuzz(func(t *testing.T, raw []byte, bits uint8, allowFirstLast bool, want []byte) {
		addr, ok := netip.AddrFromSlice(raw)
		if !ok || int(bits) > addr.BitLen() {
			return
		}
		p := netip.PrefixFrom(addr.Unmap(), int(min(int(bits), addr.Unmap().BitLen()))).Masked()
		b, err := ParseCIDRBlock(p.String())
		if err != nil {
			return
		}
		a := NewAllocator()
		a.SetPools([]Pool{{Name: "p", Created: epoch, Blocks: []Block{b}, AllowFirstLastIPs: allowFirstLast}})
		fam := FamilyOf(b.First)
		for i := 0; i < 4; i++ {
			svc := Service{Key: ServiceKey{"ns", string(rune('a' + i))}, Families: []Family{fam}}
			if i < len(want) {
				// Request an address inside the block.
				r, _ := b.First.Prefix(b.Bits)
				x := r.Addr()
				for j := 0; j < int(want[i]) && r.Contains(x.Next()); j++ {
					x = x.Next()
				}
				svc.Requested = []netip.Addr{x}
			}
			for _, got := range a.Assign(svc).Addrs {
				if what := UnusableAddr(got); what != "" {
					t.Fatalf("pool %s handed %s (%s) to %s", p, got, what, svc.Key)
				}
			}
		}
	})
}
