package agent

import (
	"context"
	"time"

	"k8s.io/client-go/rest"

	"github.com/mooringlb/mooring/internal/podipamctl"
)

// PodIPAM configures the agent's pod address allocator (internal/ipamd via
// podipamctl.RunNode). An empty Socket disables it; otherwise it follows
// the mode recorded in the cluster and does nothing in mode off.
type PodIPAM struct {
	Socket, StateDir string
	// Namespace holds the recorded mode (the controller's namespace).
	Namespace   string
	PreAllocate int
	Grace       time.Duration
	// Routes is "direct" or "none" (see podipamctl.NodeConfig.PodRoutes).
	Routes string
}

// runPodIPAM is the agent's hook into pod IPAM.
func runPodIPAM(ctx context.Context, cfg *Config, rest *rest.Config) error {
	p := cfg.PodIPAM
	if p.Socket == "" {
		return nil
	}
	return podipamctl.RunNode(ctx, podipamctl.NodeConfig{
		REST: rest, NodeName: cfg.NodeName, Namespace: p.Namespace, StateDir: p.StateDir, Socket: p.Socket,
		PreAllocate: p.PreAllocate, Grace: p.Grace, Interval: time.Second, PodRoutes: p.Routes,
		Log: cfg.Log.With("sub", "podipam"),
	})
}
