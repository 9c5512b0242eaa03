package agent

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/mooringlb/mooring/internal/agent/ipam"
	"github.com/mooringlb/mooring/internal/cni"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// addPodIPAMFlags binds the pod IPAM flags; the mode itself is not a flag:
// the agent follows the one recorded in the cluster.
func addPodIPAMFlags(f *pflag.FlagSet, p *ipam.Config) {
	f.StringVar(&p.Socket, "pod-ipam-socket", cni.DefaultSocket, "unix socket the mooring-ipam CNI plugin reaches the agent on; empty disables pod IPAM")
	f.StringVar(&p.StateDir, "pod-ipam-state-dir", "/var/lib/mooring/ipam", "folder keeping this node's pod address allocations across restarts")
	f.StringVar(&p.Namespace, "pod-ipam-namespace", "mooring-system", "namespace of the controller, where the pod IPAM mode is recorded")
	f.IntVar(&p.PreAllocate, "pod-ipam-pre-allocate", podipamctl.DefaultPreAllocate, "free addresses kept ready per pool in use")
	f.DurationVar(&p.Grace, "pod-ipam-release-grace", 5*time.Minute, "how long a block stays empty before it is given back")
	f.DurationVar(&p.ReconcileInterval, "pod-ipam-reconcile-interval", podipamctl.DefaultReconcileInterval, "how often to list this node's pods and free the addresses of pods that left the API without a CNI DEL (freed when two lists this far apart miss the pod); 0 turns it off")
	f.DurationVar(&p.ReconcileMinAge, "pod-ipam-reconcile-min-age", podipamctl.DefaultReconcileMinAge, "how long an address must have been held before reconciliation may find it leaked")
	f.StringVar(&p.Routes, "pod-routes", "direct", "direct: route every other node's pod blocks via that node's address (nodes on one L2 segment); none: leave routing to something else")
}
