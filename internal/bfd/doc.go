// Package bfd is Mooring's BFD: asynchronous-mode Bidirectional
// Forwarding Detection (RFC 5880) for single-hop BGP sessions (RFC 5881),
// so a router drops a dead node's next hop in under a second.
//
// It replaces GoBGP 4.8's BFD, which resets healthy sessions against FRR
// (docs/bgp.md, "BFD against FRR"): fsm.Session is the pure state
// machine (no clock, no sockets, no Kubernetes; table-tested and fuzzed),
// Server the thin adapter that owns the UDP sockets (port 3784, TTL 255, source
// ports 49152–65535) and the timers, and tells its caller when a path
// fails. Packets are encoded by GoBGP's packet/bfd.
package bfd
