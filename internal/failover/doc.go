// Package failover is the failover measurement behind `mooring failover`:
// it sends requests to a LoadBalancer address, kills the node that announces
// it, and records what a client saw — the timeline (kill, first error,
// owner change, recovery, last error, stale endpoints leaving the
// EndpointSlice), errors per phase by class, a summary over runs, and an SVG
// picture of each run.
//
// Phase 1 is the outage: from the kill until the address answers again.
// Phase 2 is the stale-endpoint tail: from then until the dead node's
// endpoints have left the EndpointSlice and errors have stopped (seed 002
// measured 17.8–22.2 s and errors until 43.5–54.0 s for Cilium).
//
// The pure parts (classify.go, timeline.go, stats.go, svg.go, report.go,
// spread.go) import nothing from k8s.io and are table-tested. The seams are
// interfaces or funcs so the lab can plug in its own: DialFunc (requests from
// the client's network namespace), Killer and Restorer (hard node kill and
// restart), OwnerObserver (the MAC the client sees for the address) and
// Cluster (EndpointSlices and who announces, from the L2Announcers; kube.go
// is its client-go adapter). Run owns every goroutine it starts.
package failover
