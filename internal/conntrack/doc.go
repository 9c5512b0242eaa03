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
// Selection (Match) is pure; the netlink side lives in conntrack_linux.go
// (github.com/ti-mo/conntrack) and works on the calling process's network
// namespace. It imports nothing from Kubernetes.
package conntrack
