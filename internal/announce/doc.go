// Package announce decides which node answers ARP (IPv4) and NDP (IPv6) for
// every announced address, and on which of the local node's interfaces.
//
// It is the pure core of the L2 agent: policies, Services, Nodes, the live
// gossip members and the local interfaces come in as plain data; the desired
// (address, interface) table for the local node and the owner of every
// address come out. Every agent runs the same function on the same inputs
// (informer caches plus gossip membership), so they agree on one owner per
// address without talking to each other and without writing anything to the
// API server: the election costs nothing per Service.
//
// Ownership is rendezvous (highest-random-weight) hashing of (node, address)
// over the live eligible nodes. It spreads addresses evenly, and when a node
// dies only the addresses it owned move; nobody else's ranking changes.
//
// The package may not import k8s.io, sigs.k8s.io, netlink or socket code, and
// reads no clock: the agent (internal/agent) converts API objects into
// Input and makes Result true.
//
//mooring:pure
package announce
