// Package realnode runs the lab's real Kubernetes nodes (`mooring lab up
// --runtime=containerd`): per node network namespace a real containerd
// (own root, state and socket) with Debian's runc, and a real kubelet
// registered to the lab's apiserver, both in a mount namespace of the node
// whose private folders cover the host paths they would otherwise share
// (/var/lib/kubelet, /var/log/pods, /run/containerd, /opt/cni/bin, ...).
//
// It owns: the node's files (Layout; the rendered containerd, kubelet and
// CNI configuration, pure and tested without a machine), the node's mount
// namespace (Mounts, the hidden `mooring lab node-mounts`), the node's
// cgroup parent (created, emptied by SIGKILL, removed), side-loading images
// with ctr, and the host-wide state a kubelet needs (Host: sysctls and
// mount-point folders, shared by every lab on the machine and restored by
// the last one to leave).
//
// It starts no process itself: internal/lab runs the commands it builds,
// so that every process is the lab's (logged, killed with its node and on
// the way out). It may import golang.org/x/sys and the standard library;
// nothing from k8s.io, and nothing else of Mooring.
package realnode
