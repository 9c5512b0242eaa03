package kubelet

import (
	"context"

	corev1 "k8s.io/api/core/v1"
)

// network sets up and tears down pods' networks on this node.
type network interface {
	// ready returns once pods can be wired: for CNI, after the network's
	// STATUS succeeds and a GC has freed what an earlier run of this
	// kubelet left behind.
	ready(ctx context.Context) error
	// status is the network's health as the runtime reports it to the
	// kubelet (CNI STATUS): nil when pods can be wired.
	status(ctx context.Context) error
	// wire gives the running pod p its links and addresses (p.addrs).
	wire(ctx context.Context, obj *corev1.Pod, p *pod) error
	// unwire undoes wire (also a partial one); the pod's process may be
	// gone already.
	unwire(ctx context.Context, p *pod)
}

// CNIConfig is where the stand-in finds the pod network, as a container
// runtime does: one network configuration list for eth0 (e.g. bridge or
// ptp with mooring-ipam) and the plugin folders. Loopback is attached as
// a network of its own, as containerd and CRI-O do.
type CNIConfig struct {
	// ConfList is the .conflist of the pod network.
	ConfList string
	// BinDirs are searched for plugins (CNI_PATH), in order.
	BinDirs []string
	// CacheDir keeps libcni's results for DEL and GC; it must survive a
	// kubelet restart so GC can find what the last run attached.
	CacheDir string
}

// Interface names inside a pod.
const (
	podIfName = "eth0"
	loIfName  = "lo"
)
