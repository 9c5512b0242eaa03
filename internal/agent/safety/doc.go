// Package safety holds the agent's two checks for a second ARP/NDP
// responder beside the owner: the stale local copy (an announced address
// configured on this node, e.g. a forgotten kube-ipvs0, that the kernel
// answers for by itself with arp_ignore=0) and the split-brain probe
// (another MAC answering for an address this node announces). Each finding
// is a metric, a log line and one Event on the Services holding the
// address; a split that begins or ends re-sends the gratuitous series.
//
// It may import controller-runtime's client (to read the Services it
// records on), the API types, internal/agent/status (the Recorder),
// internal/agent/mailbox and internal/announce (StaleLocal); the node's
// links, sysctls and raw sockets come through the interfaces it defines
// (internal/agent/host implements them).
package safety
