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
	Ready bool
}

// ErrNotSpread means the measurement would not measure L2 failover: killing
// the announcing node could take every ready backend with it, and the run
// would measure pod rescheduling instead (seed 002, failure 4).
var ErrNotSpread = errors.New("ready backends are not spread over at least two nodes")

// ReadyNodes returns the nodes with at least one ready endpoint, sorted, and
// how many ready endpoints name no node.
func ReadyNodes(eps []Endpoint) (nodes []string, unplaced int) {
	for _, e := range eps {
		switch {
		case !e.Ready:
		case e.Node == "":
			unplaced++
		case !slices.Contains(nodes, e.Node):
			nodes = append(nodes, e.Node)
		}
	}
	slices.Sort(nodes)
	return nodes, unplaced
}

// CheckSpread returns nil when the ready endpoints sit on at least two
// nodes, and otherwise an error wrapping ErrNotSpread that says what was
// found and what to do.
func CheckSpread(eps []Endpoint) error {
	nodes, unplaced := ReadyNodes(eps)
	if len(nodes) >= 2 {
		return nil
	}
	ready := 0
	for _, e := range eps {
		if e.Ready {
			ready++
		}
	}
	var what string
	switch {
	case ready == 0:
		what = fmt.Sprintf("no ready endpoint (%d in the EndpointSlices)", len(eps))
	case len(nodes) == 1 && unplaced == 0:
		what = fmt.Sprintf("all %d ready endpoints are on node %s", ready, nodes[0])
	default:
		what = fmt.Sprintf("%d ready endpoints on nodes [%s], %d with no nodeName", ready, strings.Join(nodes, ", "), unplaced)
	}
	return fmt.Errorf("%w: %s; run at least two replicas on different nodes (a pod anti-affinity or topology spread constraint) before measuring failover", ErrNotSpread, what)
}

// NodeEndpointsGone reports whether node has no ready endpoint left: every
// one of its endpoints is ready=false or removed.
func NodeEndpointsGone(eps []Endpoint, node string) bool {
	return !slices.ContainsFunc(eps, func(e Endpoint) bool { return e.Ready && e.Node == node })
}
