// Package evict is fast endpoint eviction (--fast-endpoint-eviction): when
// gossip has lost a node AND its kernel answers no ARP/NDP, the one
// deciding agent of the majority marks the node's pods NotReady at once
// (so their endpoints leave Services now, not after the node-monitor
// grace period), within a share limit, with an Event per node, after
// listing the node in its own L2Announcer's status.lost (the admission
// policy allows it only those pods); every
// majority agent deletes its own conntrack entries towards the dead
// node's endpoints. The guards and the reasoning are in evict.go.
//
// It may import controller-runtime's client, the API types,
// internal/agent/convert, internal/agent/status (Events, write counts),
// internal/conntrack and internal/membership (the NodeCheck type); gossip
// comes through View.
package evict
