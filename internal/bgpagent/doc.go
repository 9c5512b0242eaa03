// Package bgpagent is the agent's BGP room: it converts the BGP objects
// (BGPPeer, BGPAdvertisement, BGPCommunity, BFDProfile) and the pools into
// the pure decision's input (internal/bgp), decides for this node from the
// same Services the L2 decision reads (handed over by the agent's loop, no
// API call per Service), drives the speaker (internal/bgpspeaker), reads
// only the password Secrets its peers name, and writes this node's
// BGPSpeaker status when a session changes (at most once a second; prefix
// counters lag up to a minute, so a Service costs no write).
//
// While the API server is away at start, it decides from its state file
// (the last live configuration and passwords, 0600 in the agent's state
// folder) so that a restarted agent re-advertises within graceful
// restart's time. It opens no session before the agent's loop has handed
// it every Service once (from the caches or the agent's snapshot): an
// End-of-RIB without the routes would make the routers drop the ones
// they kept. The BGPSpeaker is written, and the password Secrets re-read,
// on goroutines of their own, so an API server that hangs never holds up
// a decision (secrets.go: the one exception is the first decision after
// start). On shutdown it stops BGP without a Cease.
//
// The agent (internal/agent) builds it with --bgp and hands it every
// decision pass through internal/agent/backend (Pass); Watched names the
// objects the agent's informer cache must watch for it.
//
// It may import the API types, controller-runtime's client, the pure core,
// the speaker and the agent's backend seam (internal/agent/backend); it
// runs no informers of its own (the agent's cache).
package bgpagent
