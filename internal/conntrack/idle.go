package conntrack

import (
	"net/netip"
	"time"
)

// Idle selects the entries a node forgets when it advertises Service
// addresses again after a withdrawal (internal/bgpagent): TCP entries in
// ESTABLISHED to an address of For that have seen no packet for at least
// its duration, in a table whose ESTABLISHED timeout is Established.
//
// Why: a router's ECMP (hash-threshold) moves some flows to another next
// hop whenever a next hop comes or goes, and the node a flow left keeps its
// entry — ESTABLISHED, translated to the pod that served it — for the
// established timeout (kube-proxy sets 24 h, the kernel's default is 5
// days). When the node gets the address back, typically with a new pod
// after a rolling update, a flow that comes back to it (an idle kept-alive
// connection, or a new connection reusing the port of one the move reset)
// matches the old entry and goes to the deleted pod: the client sees
// `network is unreachable` or waits until it times out. Forgotten, the
// flow is translated again by the node's current rules.
//
// Only ESTABLISHED TCP entries pin a flow for long (the other TCP states
// time out within minutes; kube-proxy clears the UDP entries of removed
// endpoints itself), and only idle ones can be stale: a flow that still
// reaches the node keeps its entry fresh. An entry of a connection from
// inside the cluster that was idle as long is forgotten too; its next
// packet is translated anew.
type Idle struct {
	For         map[netip.Addr]time.Duration
	Established time.Duration
}

// Selects reports whether an entry is one m deletes: established is a TCP
// entry in ESTABLISHED, origDst its original destination, remaining its
// timeout left (every packet resets it to the ESTABLISHED timeout). Cost:
// one map lookup.
func (m Idle) Selects(established bool, origDst netip.Addr, remaining time.Duration) bool {
	if !established {
		return false
	}
	idle, ok := m.For[origDst.Unmap()]
	return ok && m.Established-remaining >= idle
}
