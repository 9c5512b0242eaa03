// Package podipamctl is the Kubernetes adapter of pod IPAM: the mode lock
// (the cluster's mode is recorded at first start and a component started
// with another one refuses before leader election), the controller side
// that cuts per-node blocks (cluster-pool from flags, multi-pool from
// PodIPPool objects) and records them on PodIPAMNode objects, the node side
// (each agent registers its node by creating its PodIPAMNode with its
// demand, and serves ipamd), and the node.spec.podCIDR(s) handling of
// cluster-pool mode.
//
// The allocation decisions live in internal/podipam (pure); this package
// converts API objects into its input and writes its output back: the
// controller writes one status per node per block change (plus, in
// cluster-pool, the write-once spec.podCIDRs of a Node that has none).
package podipamctl
