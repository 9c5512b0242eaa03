package ipam

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"k8s.io/client-go/rest"

	"github.com/mooringlb/mooring/internal/podipamctl"
)

// Config configures the agent's pod address allocator (internal/ipamd via
// podipamctl.RunNode). An empty Socket disables it; otherwise it follows
// the mode recorded in the cluster and does nothing in mode off.
type Config struct {
	Socket, StateDir string
	// Namespace holds the recorded mode (the controller's namespace).
	Namespace   string
	PreAllocate int
	Grace       time.Duration
	// Routes is "direct" or "none" (see podipamctl.NodeConfig.PodRoutes).
	Routes string
}

// Run serves pod IPAM on node until ctx ends (nothing when p.Socket is
// empty); log already names the part.
func Run(ctx context.Context, p Config, node string, rest *rest.Config, log *slog.Logger) error {
	if p.Socket == "" {
		return nil
	}
	nc := podipamctl.NodeConfig{
		REST: rest, NodeName: node, Namespace: p.Namespace, StateDir: p.StateDir, Socket: p.Socket,
		PreAllocate: p.PreAllocate, Grace: p.Grace, Interval: time.Second, PodRoutes: p.Routes,
		Log: log,
	}
	if err := nc.Validate(); err != nil {
		return err
	}
	// Pod IPAM needs the API server to start; an agent started while it is
	// unreachable keeps announcing (from its snapshot) and retries. Any
	// other error ends the agent, as before (a mode change restarts it).
	for wait := time.Second; ; wait = min(2*wait, 30*time.Second) {
		err := podipamctl.RunNode(ctx, nc)
		if err == nil || ctx.Err() != nil {
			return nil
		}
		if !unreachable(err) {
			return err
		}
		nc.Log.Warn("pod IPAM could not start: the API server is unreachable; retrying", "in", wait, "err", err)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
}

// unreachable reports whether err says the API server could not be
// reached (a network error, or it answered that it is unavailable).
func unreachable(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) || apierrors.IsServerTimeout(err)
}
