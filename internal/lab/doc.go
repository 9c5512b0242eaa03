// Package lab is the one-machine cluster behind `mooring lab`: a real
// control plane (etcd, kube-apiserver, kube-controller-manager), N node
// network namespaces on one bridge, each with the kubelet stand-in
// (internal/lab/kubelet), real kube-proxy in nftables mode and a Mooring
// agent, the Mooring controller, a client namespace, and a demo pool, L2
// policy and 2-replica echo Service. docs/lab.md explains the design.
//
// The process that runs Run owns everything: the namespaces (through
// internal/netlab), every process (each started inside its namespace and
// killed as a process group), and the state dir through which other
// invocations find it (Open, Handle.Kill, Handle.Down, Exec). When Run
// returns, nothing it made is left.
//
// Other code drives a lab two ways. In process (tests): Run hands its ready
// callback a Ready whose Cluster has Host (the netlab hosts, e.g. the
// client for HTTPGet or netlab.Probe), Kill and Restore. From another
// process (`mooring failover`, scripts): Open(stateDir) returns a Handle
// with the State (hosts, MACs, addresses, the Service), Kill, Restore,
// Down and NetNSPath; Exec runs a program in a namespace.
//
// It may import Kubernetes client libraries, internal/netlab and
// internal/kube; nothing else in Mooring imports it except the CLI, the
// failover tool and tests.
package lab
