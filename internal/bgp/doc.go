// Package bgp decides which prefixes each node advertises to which BGP
// peer, with which attributes, and how each node's sessions are set up.
//
// It is the pure core of the agent's BGP speaker, as internal/announce is
// of its L2 responder, and reads the same snapshot: Services (as
// announce.Service, shared with the L2 decision without a copy), Nodes,
// pools, and the BGPPeer, BGPAdvertisement, BGPCommunity and BFDProfile
// objects as plain data. Decide returns, per node, the sessions to hold
// (resolved timers, ASNs, router ID, BFD, next hops) and the routes per
// session; the speaker (internal/bgpspeaker) makes them true and nothing
// is written to the API server per Service.
//
// Every node may advertise an address at once (ECMP at the router); what
// limits a node is the advertisement's and the peer's node selectors, the
// node.kubernetes.io/exclude-from-external-load-balancers label, and for
// externalTrafficPolicy: Local a ready local endpoint.
//
// The package is pure: it may import only the standard library and the
// other pure cores (internal/announce, internal/ipalloc) — nothing from
// k8s.io, sigs.k8s.io, GoBGP, netlink or sockets — and reads no clock
// (internal/codecheck checks the imports).
//
//mooring:pure
package bgp
