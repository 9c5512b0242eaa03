// Package controller is the Kubernetes adapter of LB-IPAM: it watches
// LoadBalancerIPPools, Services and Namespaces, feeds them through one
// conversion layer (convert.go) into the pure core internal/lbipam, and
// writes back what the core decided — Service status (ingress and the
// mooring.dev/AddressAssigned condition in one patch), Events, pool status
// and metrics. One replica is active at a time through a single Lease.
//
// Writes are the cost that grows with the number of Services, so the
// adapter compares before it writes: a converged cluster causes no writes,
// and converging one Service costs one status patch plus one Event.
//
// The allocator is not safe for concurrent use; state.go serialises it.
// Nothing in this package decides an address: that is lbipam's job.
package controller
