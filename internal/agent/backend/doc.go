// Package backend is the seam between the agent's decision loop and its
// announcement backends other than the L2 responder: a Backend gets, after
// every pass, the same converted inputs (Services, Nodes, live members,
// capabilities) the L2 decision was fed and that decision's changes, and
// turns them into its own announcements without any API write. The L2
// responder is driven directly by the loop (internal/agent); a BGP speaker
// (internal/agent/bgp over the pure internal/bgp) plugs in here.
//
// It imports internal/announce only, so a backend's adapter can depend on
// it without importing the agent.
package backend
