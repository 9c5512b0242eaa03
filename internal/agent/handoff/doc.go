// Package handoff is how addresses change hands between live nodes without
// two responders: a node that comes back to a cluster that served without
// it (a restart, the end of a drain's exclusion label, a stall longer than
// its peers wait) is held down (no candidate for --hold-down), then
// publishes its readiness and takes its addresses only once every ready
// peer has confirmed in gossip that it let them go (Returning); a stall of
// the whole process is noticed as a gap in the monotonic clock (Stall);
// on SIGTERM gossip leaves only after the responder closed (AfterClosed).
// The peer side (which returning members a decision counts, published
// only after the responder applied it) lives with the capabilities in
// internal/agent/eligibility.
//
// Time comes from the caller (the agent's clock); nothing here schedules
// or writes: methods return the waits after which to decide again. It may
// import internal/membership (the gossip metadata) and prometheus.
package handoff
