// Package eligibility decides which members are candidates for addresses:
// each agent works out where it can answer (its usable links, the
// interfaces a policy that names none uses), publishes that in its gossip
// metadata, and hands the core every live member's published capability,
// so all agents rank the same candidates. It applies this node's hand-off
// state (internal/agent/handoff: hold-down, exclusion, take) to what it
// publishes, confirms returning peers only after the responder applied
// the decision that lets their addresses go, and reports a node that
// cannot serve a policy selecting it (a metric, a log line, a Node Event).
//
// It may import the API types, controller-runtime's client (the Node
// Events), internal/agent/{convert,handoff,host,mailbox,status},
// internal/announce and internal/membership.
package eligibility
