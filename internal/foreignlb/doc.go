// Package foreignlb reads, read-only, what other load-balancer
// implementations have in a cluster, so that Mooring's operator tools can
// say who serves an address now: MetalLB (its speaker and controller Pods
// and workloads, its IPAddressPools, the ServiceL2Statuses naming the node
// each Service is announced from, the pool it allocated each Service's
// address from), Cilium (its L2 announcement policies and the per-Service
// leases whose holder answers ARP), kube-vip and k3s servicelb.
//
// `mooring status`, `mooring doctor` and `mooring migrate metallb plan`
// read it. Running Pods, not a DaemonSet's status, say what runs: a
// DaemonSet whose status nobody updates (no controller, a stuck one) must
// not hide speakers that answer ARP.
//
// It may import client-go and apimachinery; it writes nothing and imports
// no other Mooring package.
package foreignlb
