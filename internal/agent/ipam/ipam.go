package ipam

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	// ReconcileInterval and ReconcileMinAge tune the freeing of addresses
	// whose pod left the API without a DEL (0 interval: off).
	ReconcileInterval, ReconcileMinAge time.Duration
}

// MinReleaseGrace is the shortest --pod-ipam-release-grace that does not
// race the kubelet: a pod of a pool its node holds no block of fails its
// first ADD, the agent asks for a block, and the kubelet retries the pod
// only 10-15 s later (its backOffPeriod of 10 s, pod worker jitter 0.5).
// A block released before the retry is gone again when it comes: with
// 10 s, one of four real-node multi-pool runs left a pod without an
// address for over two minutes.
const MinReleaseGrace = 15 * time.Second

// Warnings names settings that work but are risky, each with its fix; the
// agent logs them at start.
func (p Config) Warnings() []string {
	if p.Socket == "" || p.Grace >= MinReleaseGrace {
		return nil
	}
	return []string{fmt.Sprintf("--pod-ipam-release-grace=%s is shorter than %s: in multi-pool a block cut for a pod waiting on its first ADD can be released before the kubelet retries that pod (10-15 s later), and the pod may wait minutes for an address; set --pod-ipam-release-grace=1m or more (the default is 5m; Helm: agent.flags.podIpamReleaseGrace)", p.Grace, MinReleaseGrace)}
}

// Run serves pod IPAM on node until ctx ends (nothing when p.Socket is
// empty); log already names the part.
func Run(ctx context.Context, p Config, node string, rest *rest.Config, reg prometheus.Registerer, log *slog.Logger) error {
	if p.Socket == "" {
		return nil
	}
	for _, w := range p.Warnings() {
		log.Warn(w)
	}
	nc := podipamctl.NodeConfig{
		REST: rest, NodeName: node, Namespace: p.Namespace, StateDir: p.StateDir, Socket: p.Socket,
		PreAllocate: p.PreAllocate, Grace: p.Grace, Interval: time.Second, PodRoutes: p.Routes,
		ReconcileInterval: p.ReconcileInterval, ReconcileMinAge: p.ReconcileMinAge,
		Metrics: podipamctl.NewNodeMetrics(reg), Log: log,
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
