package podipam

import (
	"cmp"
	"net/netip"
	"slices"
)

// NodeBlocks is one node as the route decision sees it: its addresses on
// the shared segment and its pod address blocks.
type NodeBlocks struct {
	Name   string
	Addrs  []netip.Addr
	Blocks []netip.Prefix
}

// Route sends a block to the node holding it.
type Route struct {
	Dst netip.Prefix
	Via netip.Addr
}

// DirectRoutes is the table of "direct" pod routing (flannel's host-gw,
// Cilium's auto-direct-node-routes): every other node's block via that
// node's first address of the block's family. A block whose node has no
// address of its family gets no route. Nodes must share one L2 segment.
// Cost: O(b log b) for b blocks.
func DirectRoutes(self string, nodes []NodeBlocks) []Route {
	var out []Route
	for _, n := range nodes {
		if n.Name == self {
			continue
		}
		for _, b := range n.Blocks {
			i := slices.IndexFunc(n.Addrs, func(a netip.Addr) bool { return a.Is4() == b.Addr().Is4() })
			if i < 0 {
				continue
			}
			out = append(out, Route{Dst: b.Masked(), Via: n.Addrs[i]})
		}
	}
	slices.SortFunc(out, func(a, b Route) int {
		return cmp.Or(a.Dst.Addr().Compare(b.Dst.Addr()), cmp.Compare(a.Dst.Bits(), b.Dst.Bits()))
	})
	return slices.CompactFunc(out, func(a, b Route) bool { return a.Dst == b.Dst })
}
