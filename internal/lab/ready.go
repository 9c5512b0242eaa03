package lab

import "time"

// Ready is what Run hands its caller once the lab is ready.
type Ready struct {
	Kubeconfig string
	Service    ServiceState
	// URL reaches the Service (its LoadBalancer address with Mooring, its
	// ClusterIP from a node without); From names the host to use it from.
	URL, From string
	// Elapsed is the time from Run's start until ready.
	Elapsed time.Duration
	// KubectlDir holds only `kubectl`, a link to the one built with the
	// control plane (its version matches the apiserver's), for $PATH; ""
	// when the kubebin folder has none.
	KubectlDir string
	// Cluster gives the caller (tests, `mooring failover`) the namespaces.
	Cluster *Cluster
}
