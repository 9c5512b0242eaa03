package podipam

import (
	"net/netip"
	"testing"
)

// FuzzAllocator feeds arbitrary pools and operation streams: the allocator
// must never panic, never hand out overlapping blocks and never cut a block
// outside its pool's CIDRs.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{10, 0, 0, 0}, uint8(24), uint8(26), []byte{0, 0, 1, 2, 0})
	f.Add([]byte{0xfd, 0, 0, 0}, uint8(120), uint8(124), []byte{0, 1, 0, 3, 3})
	f.Add([]byte{255, 255, 255, 0}, uint8(24), uint8(30), []byte{0, 0, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, addr []byte, bits, mask uint8, ops []byte) {
		var a netip.Addr
		switch len(addr) {
		case 4:
			a = netip.AddrFrom4([4]byte(addr))
		default:
			var b [16]byte
			copy(b[:], addr)
			a = netip.AddrFrom16(b)
		}
		c, err := a.Prefix(int(bits))
		if err != nil {
			return
		}
		fam := FamilyOf(c)
		fs := FamilySpec{CIDRs: []netip.Prefix{c}, MaskSize: int(mask)}
		p := Pool{Name: "p"}
		if fam == IPv4 {
			p.V4 = fs
		} else {
			p.V6 = fs
		}
		al := NewAllocator()
		al.SetPools([]Pool{p})
		al.MarkReady()
		for i, op := range ops {
			if i > 64 {
				break
			}
			switch op % 3 {
			case 0, 1:
				b, err := al.Allocate("n", "p", fam)
				if err == nil && (!contains(c, b.Prefix) || b.Prefix.Bits() != int(mask)) {
					t.Fatalf("block %s outside %s or wrong size", b.Prefix, c)
				}
			case 2:
				if held := al.Blocks(""); len(held) > 0 {
					if _, err := al.Release(held[int(op)%len(held)].Prefix); err != nil {
						t.Fatal(err)
					}
				}
			}
		}
		held := al.Blocks("")
		for i := 1; i < len(held); i++ {
			if held[i].Prefix.Overlaps(held[i-1].Prefix) {
				t.Fatalf("%s overlaps %s", held[i].Prefix, held[i-1].Prefix)
			}
		}
		_ = al.Status()
	})
}
