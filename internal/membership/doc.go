// Package membership tells an agent which other agents are alive, fast: a
// thin wrapper around hashicorp/memberlist (SWIM gossip) tuned to notice a
// hard node loss in about a second on a LAN of a few to tens of nodes, where
// a Kubernetes Lease or node heartbeat takes 15-40 s (FIELD-NOTES.md §2).
//
// The agent feeds it peer addresses from Node objects (SetPeers), reads the
// live set (Members) when Changes fires, and hands that set to the pure
// announcement core. Once joined, membership keeps working without the API
// server, and Run keeps rejoining known peers so it heals after partitions.
//
// With a NodeCheck (the kernel's ARP/NDP answer), a member gossip declares
// failed is kept while its node answers (hold.go), and one whose probe by
// this member fails is checked at once and dropped when its node does not
// answer, without waiting for the suspicion timeout (suspect.go).
//
// It imports no Kubernetes package and no other Mooring package.
package membership
