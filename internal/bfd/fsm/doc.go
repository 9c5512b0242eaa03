// Package fsm is the pure core of Mooring's BFD (internal/bfd): one
// asynchronous-mode session's state machine (RFC 5880 §6.2, §6.8) — packets
// in, state and packets out. It reads no clock, opens no socket and knows
// nothing of Kubernetes; the caller passes the time and sends what it says.
// Table-tested and fuzzed.
//
//mooring:pure
package fsm
