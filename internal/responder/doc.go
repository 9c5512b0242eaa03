// Package responder is the raw-socket end of L2 announcement: it answers ARP
// requests and IPv6 neighbour solicitations for the addresses the agent says
// this node owns, on the interfaces it names, and announces newly owned
// addresses with gratuitous ARP and unsolicited neighbour advertisements so
// that clients switch to the new owner at once instead of after their
// neighbour entry expires (23-53 s with kernel defaults, see LAB-NOTES.md).
//
// The agent computes a desired table (interface index -> addresses) and
// calls Manager.Apply once, then Manager.Update with only the addresses
// that changed (at 10,000 addresses a whole table per change cost ~10 ms);
// Manager.Run converges to it, touching only what changed. The frame logic
// (HandleARP, HandleNDP, GratuitousARP, UnsolicitedNA) is pure and fuzzed;
// the socket side sits behind the Opener/GroupConn seam.
//
// Sockets belong to the network namespace of the thread that creates them,
// and Run creates them: run the agent process wholly inside the node's
// namespace (as the real agent does), not one goroutine per namespace.
//
// The package may import the mdlayher packet libraries, golang.org/x/net,
// golang.org/x/sys, prometheus and k8s.io/utils/clock; no Kubernetes API
// packages and no other Mooring package.
package responder
