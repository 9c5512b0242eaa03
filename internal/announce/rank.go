package announce

import (
	"cmp"
	"net/netip"
	"slices"
)

// hashVersion is mixed into every score. Agents of different ranking
// versions would disagree about owners, so change it only together with a
// note in the upgrade docs.
const hashVersion = "mooring-hrw-v1"

// Score is the rendezvous weight of node for addr. It must be identical on
// every agent, every architecture and every release that shares hashVersion:
// FNV-1a over (version, node, address), then a 64-bit finalizer because
// FNV alone clusters on inputs that differ only in their last bytes (node-1,
// node-2; .100, .101). Cost: O(len(node)).
func Score(node string, addr netip.Addr) uint64 {
	return scoreFrom(nodePrefix(node), addr)
}

const (
	fnvOffset = 14695981039346656037
	fnvPrime  = 1099511628211
)

// nodePrefix is the FNV state after (version, node): computed once per node
// per decision, so ranking an address costs 16 bytes of hashing per node.
func nodePrefix(node string) uint64 {
	h := uint64(fnvOffset)
	for i := 0; i < len(hashVersion); i++ {
		h = (h ^ uint64(hashVersion[i])) * fnvPrime
	}
	h *= fnvPrime // a 0 separator
	for i := 0; i < len(node); i++ {
		h = (h ^ uint64(node[i])) * fnvPrime
	}
	return h * fnvPrime // a 0 separator
}

func scoreFrom(prefix uint64, addr netip.Addr) uint64 {
	h := prefix
	for _, b := range addr.Unmap().As16() {
		h = (h ^ uint64(b)) * fnvPrime
	}
	return fmix64(h)
}

// fmix64 is MurmurHash3's finalizer: full avalanche of all 64 bits.
func fmix64(h uint64) uint64 {
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return h
}

// Rank returns nodes in preference order for addr: the owner first, then the
// node that takes over when it dies, and so on. Cost: O(n log n).
func Rank(nodes []string, addr netip.Addr) []string {
	out := slices.Clone(nodes)
	slices.SortFunc(out, func(a, b string) int {
		sa, sb := Score(a, addr), Score(b, addr)
		return cmp.Or(-cmp.Compare(sa, sb), cmp.Compare(a, b))
	})
	return slices.Compact(out)
}
