package lbipam

import (
	"math/big"
	"net/netip"

	"github.com/mooringlb/mooring/internal/ipalloc"
)

// MetalLB's avoidBuggyIPs: some old client firmware drops traffic to an
// IPv4 address ending in .0 or .255 (it takes them for network or broadcast
// addresses whatever the real prefix). A pool that sets it never hands out
// those addresses of any /24 inside its blocks. IPv6 is not affected.

// buggyIP reports whether a ends in .0 or .255.
func buggyIP(a netip.Addr) bool {
	if !a.Is4() {
		return false
	}
	last := a.As4()[3]
	return last == 0 || last == 255
}

// avoids reports whether the pool refuses to hand out a.
func (p *pool) avoids(a netip.Addr) bool { return p.AvoidBuggyIPs && buggyIP(a) }

// buggyCount returns how many addresses of r end in .0 or .255. Cost: O(1).
func buggyCount(r ipalloc.Range) *big.Int {
	if !r.First.Is4() {
		return new(big.Int)
	}
	first, last := u32(r.First), u32(r.Last)
	// multiples(k) counts n in [first, last] with n % 256 == k.
	multiples := func(k int64) int64 {
		upTo := func(x int64) int64 { // n in [0, x] with n % 256 == k
			if x < k {
				return 0
			}
			return (x-k)/256 + 1
		}
		return upTo(last) - upTo(first-1)
	}
	return big.NewInt(multiples(0) + multiples(255))
}

func u32(a netip.Addr) int64 {
	b := a.As4()
	return int64(b[0])<<24 | int64(b[1])<<16 | int64(b[2])<<8 | int64(b[3])
}
