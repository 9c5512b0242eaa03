// Package bgpspeaker makes one node's BGP decision (internal/bgp) true:
// the sessions the node holds and the routes each session carries.
//
// Speaker is backend-neutral: it diffs the decision against what the
// Router holds and calls the Router for exactly the difference, so a
// Service change costs one route per session and adding or removing a
// peer touches no other session. GoBGP (gobgp.go) is the Router today: an
// embedded github.com/osrg/gobgp/v4 server with a route table (VRF) per
// peer, so each peer gets its own prefixes, attributes and next hops, and
// BFD from internal/bfd (not GoBGP's, which reset healthy sessions against
// FRR and BIRD).
//
// Sessions fail closed: a peer whose password Secret cannot be read, or
// whose TCP-MD5 the kernel refuses, is not opened at all, and Status says
// why (Reason* constants, the same strings as the API's BGPReason*). On
// SIGTERM the agent calls Shutdown(graceful): no Cease is sent, so routers
// that negotiated graceful restart keep the node's routes while it
// restarts; the restarted agent re-adds its peers with the Restart State
// bit and sends End-of-RIB at most about a second after each session is up.
//
// It may import the pure core (internal/bgp), GoBGP, netlink and sockets;
// nothing from k8s.io or sigs.k8s.io (internal/agent/bgp converts API
// objects and writes the node's BGPSpeaker status).
package bgpspeaker
