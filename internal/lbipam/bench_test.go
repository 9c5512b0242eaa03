package lbipam

import (
	"fmt"
	"net/netip"
	"testing"
)

func benchServices(n int, f Family) []Service {
	out := make([]Service, n)
	for i := range out {
		out[i] = Service{Key: ServiceKey{"bench", fmt.Sprintf("svc-%05d", i)}, Families: []Family{f}, RequireAllFamilies: true}
	}
	return out
}

// BenchmarkFill: one op = a new Allocator, one pool, 10,000 Services
// assigned. B/op must not depend on the pool size (compare /16 with /8,
// /64 with /48).
func BenchmarkFill(b *testing.B) {
	for _, tc := range []struct {
		name, cidr string
		fam        Family
	}{
		{"v4-slash16", "10.0.0.0/16", IPv4},
		{"v4-slash8", "10.0.0.0/8", IPv4},
		{"v6-slash64", "2001:db8::/64", IPv6},
		{"v6-slash48", "2001:db8::/48", IPv6},
	} {
		b.Run(tc.name, func(b *testing.B) {
			pools := []Pool{mkPool("p", 0, cidr(b, tc.cidr))}
			svcs := benchServices(10000, tc.fam)
			b.ReportAllocs()
			for b.Loop() {
				a := NewAllocator()
				a.SetPools(pools)
				for _, s := range svcs {
					if r := a.Assign(s); len(r.Pending) != 0 {
						b.Fatal(r.Pending)
					}
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/10000, "ns/service")
		})
	}
}

// BenchmarkAssignIntoFull: one op = assign then release one Service into a
// pool that already has 10,000 addresses used (the steady-state cost).
func BenchmarkAssignIntoFull(b *testing.B) {
	for _, tc := range []struct {
		name, cidr string
		fam        Family
	}{{"v4-slash16", "10.0.0.0/16", IPv4}, {"v6-slash64", "2001:db8::/64", IPv6}} {
		b.Run(tc.name, func(b *testing.B) {
			a := NewAllocator()
			a.SetPools([]Pool{mkPool("p", 0, cidr(b, tc.cidr))})
			for _, s := range benchServices(10000, tc.fam) {
				a.Assign(s)
			}
			s := Service{Key: ServiceKey{"bench", "new"}, Families: []Family{tc.fam}}
			b.ReportAllocs()
			for b.Loop() {
				a.Assign(s)
				a.Release(s.Key)
			}
		})
	}
}

// BenchmarkSetPools100: 100 pools of one /24 and one IPv6 /64 each, every
// tenth overlapping its neighbour, with 5,000 addresses held.
func BenchmarkSetPools100(b *testing.B) {
	var pools []Pool
	for i := 0; i < 100; i++ {
		v4 := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 10 * 10), byte(i), 0}), 24)
		if i%10 == 9 {
			v4 = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i / 10 * 10), byte(i - 1), 0}), 23)
		}
		v6 := netip.PrefixFrom(netip.AddrFrom16([16]byte{0x20, 0x01, 0x0d, 0xb8, 0, byte(i)}), 64)
		p := mkPool(fmt.Sprintf("pool-%03d", i), i, cidr(b, v4.Masked().String()), cidr(b, v6.String()))
		p.Priority = ptr(int32(i % 3))
		pools = append(pools, p)
	}
	a := NewAllocator()
	a.SetPools(pools)
	for _, s := range benchServices(5000, IPv4) {
		a.Assign(s)
	}
	b.ReportAllocs()
	for b.Loop() {
		if reps := a.SetPools(pools); len(reps) != 100 {
			b.Fatal(len(reps))
		}
	}
}
