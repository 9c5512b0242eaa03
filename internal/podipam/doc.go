// Package podipam is the pure core of pod IP address management: pools of
// CIDRs, per-node blocks cut from them, and the node-side decision of how
// many addresses to ask for and which empty blocks to give back.
//
// Two halves, both without I/O:
//
//   - Allocator (controller side) holds every pool and every block handed to
//     a node. It cuts blocks on request, refuses to cut before every block
//     already held has been imported (restart safety), resolves overlapping
//     pools (the newer pool loses and cuts nothing), and keeps a CIDR removed
//     from a pool reserved while nodes still hold blocks of it.
//   - Demand (node side) turns the addresses in use per block into the
//     number of addresses the node needs and the empty blocks it may release
//     once they have been empty for a grace period. Only the node knows
//     which addresses it handed out, so only the node decides a release:
//     the controller never frees a block the node still uses.
//
// The package imports nothing from k8s.io or sigs.k8s.io; internal/podipamctl
// converts API objects into its input, and internal/ipamd drives Demand.
// Time is an input (Demand takes now), never read from the wall clock.
//
//mooring:pure
package podipam
