package failover

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// Endpoint is one backend of the Service as its EndpointSlices say, reduced
// to what the measurement needs.
type Endpoint struct {
	Addr  netip.Addr
	Node  string // "" when the slice does not say
	Pod   string // namespace/name of the target pod; "" when the slice does not say
	Ready bool
}

// backend is what counts as one backend: its pod (a dual-stack pod has an
// endpoint per family), else its address.
func (e Endpoint) backend() string {
	if e.Pod != "" {
		return e.Pod
	}
	return e.Addr.String()
}

// countBackends counts the distinct backends among eps for which keep is
// true.
func countBackends(eps []Endpoint, keep func(Endpoint) bool) int {
	seen := map[string]bool{}
	for _, e := range eps {
		if keep(e) {
			seen[e.backend()] = true
		}
	}
	return len(seen)
}

// ErrNotSpread means the measurement would not measure L2 failover: killing
// the announcing node could take every ready backend with it, and the run
// would measure pod rescheduling instead (seed 002, failure 4).
var ErrNotSpread = errors.New("ready backends are not spread over at least two nodes")

// ReadyNodes returns the nodes with at least one ready endpoint, sorted, and
// how many ready backends (pods, see Endpoint) name no node.
func ReadyNodes(eps []Endpoint) (nodes []string, unplaced int) {
	for _, e := range eps {
		if e.Ready && e.Node != "" && !slices.Contains(nodes, e.Node) {
			nodes = append(nodes, e.Node)
		}
	}
	slices.Sort(nodes)
	return nodes, countBackends(eps, func(e Endpoint) bool { return e.Ready && e.Node == "" })
}

// CheckSpread returns nil when the ready endpoints sit on at least two
// nodes, and otherwise an error wrapping ErrNotSpread that says what was
// found and what to do.
func CheckSpread(eps []Endpoint) error {
	nodes, unplaced := ReadyNodes(eps)
	if len(nodes) >= 2 {
		return nil
	}
	// Counted per backend: a dual-stack pod is one backend with two
	// endpoints.
	ready := countBackends(eps, func(e Endpoint) bool { return e.Ready })
	plural := func(n int, one, many string) string {
		if n == 1 {
			return fmt.Sprintf("%d %s", n, one)
		}
		return fmt.Sprintf("%d %s", n, many)
	}
	var what string
	switch {
	case ready == 0:
		what = fmt.Sprintf("no ready backend (%s in the EndpointSlices)", plural(countBackends(eps, func(Endpoint) bool { return true }), "backend", "backends"))
	case len(nodes) == 1 && unplaced == 0 && ready == 1:
		what = fmt.Sprintf("the only ready backend is on node %s", nodes[0])
	case len(nodes) == 1 && unplaced == 0:
		what = fmt.Sprintf("all %d ready backends are on node %s", ready, nodes[0])
	default:
		what = fmt.Sprintf("%s on nodes [%s], %d with no nodeName", plural(ready, "ready backend", "ready backends"), strings.Join(nodes, ", "), unplaced)
	}
	return fmt.Errorf("%w: %s; run at least two replicas on different nodes (a pod anti-affinity or topology spread constraint) before measuring failover", ErrNotSpread, what)
}

// NodeEndpointsGone reports whether node has no ready endpoint left: every
// one of its endpoints is ready=false or removed.
func NodeEndpointsGone(eps []Endpoint, node string) bool {
	return !slices.ContainsFunc(eps, func(e Endpoint) bool { return e.Ready && e.Node == node })
}
