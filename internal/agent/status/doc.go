// Package status is what the agent shows through the API server, and how
// any tool reads it back: the Writer keeps this node's L2Announcer (its
// gossip view, interfaces, capability, problems), the policies' status
// conditions (only on the one status writer the core names) and the
// Events of a decision in step with the latest decision, writing only on
// a difference; the Recorder writes Events; Writes counts every API write
// the agent makes (mooring_agent_api_writes_total). Announcements
// recomputes from the API alone who announces every address (`mooring
// status`, doctor, the failover measurement).
//
// Nothing here is on the path from a membership change to an ARP reply:
// an unreachable API server delays status, never a failover.
//
// It may import controller-runtime's client, the API types,
// internal/agent/convert, internal/agent/mailbox and internal/announce.
package status
