// Package conntrack removes the connection-tracking entries that pin
// traffic to endpoints on a dead node.
//
// kube-proxy DNATs a Service address to one endpoint per connection and the
// kernel remembers the choice in conntrack. When a node dies, an entry made
// before its endpoints were removed keeps every later packet of that
// 5-tuple (a client's retransmitted SYN, a long-lived connection) going to
// the dead endpoint until the entry times out; kube-proxy cleans such
// entries for UDP only. The agent deletes them once a node is confirmed
// dead (internal/agent evict.go), so the next packet is load-balanced again.
//
// The same pinning outlives an ECMP rehash: a node that a router's hash
// moved flows away from keeps their ESTABLISHED entries, translated to the
// pod that served them. When the node advertises the address again over
// BGP, often with a new pod, the agent forgets the entries that have been
// idle since the withdrawal (Idle, internal/bgpagent returns.go), so a
// flow that comes back is translated afresh instead of going to a deleted
// pod.
//
// Selection (Match, Idle) is pure; the netlink side works on the calling
// thread's network namespace: the table is read by a streamed ctnetlink
// dump of our own (dump_linux.go: one receive buffer whatever the table's
// size, every protocol's tuple decoded) and entries are deleted through
// github.com/ti-mo/conntrack (conntrack_linux.go). It imports nothing from
// Kubernetes.
package conntrack
