// Package lbipam is the pure core of LoadBalancer address management: pools
// and Service requests go in, assignments and reasons come out.
//
// It imports nothing from k8s.io or sigs.k8s.io and never reads the clock:
// the Kubernetes adapter (internal/controller) converts API objects into the
// types below and writes the results back. The Allocator is not safe for
// concurrent use; the adapter serialises calls.
//
// Start-up order (as Cilium does it): SetPools, then Import every existing
// Service (addresses already held are adopted as they are), then Assign.
//
//mooring:pure
package lbipam
