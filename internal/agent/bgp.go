package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/bgpagent"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/conntrack"
)

// BGPConfig turns on the BGP backend (internal/bgpagent, docs/bgp.md).
type BGPConfig struct {
	// Enabled builds the BGP speaker; it stays idle (no session, no
	// listener) while no BGPPeer selects the node.
	Enabled bool
	// ListenPort is where the speaker accepts sessions; 0: it only
	// connects out.
	ListenPort int
	// SecretNamespace holds the peers' password Secrets.
	SecretNamespace string
}

func (c BGPConfig) validate() error {
	switch {
	case !c.Enabled:
		return nil
	case c.ListenPort < 0 || c.ListenPort > 65535:
		return fmt.Errorf("--bgp-listen-port %d: want 0 (do not listen) or 1..65535", c.ListenPort)
	case c.SecretNamespace == "":
		return errors.New("--bgp-secret-namespace is required with --bgp (Mooring's namespace, where the peers' password Secrets are)")
	}
	return nil
}

// bgpBackend builds the BGP backend when cfg says so (nil otherwise) and
// registers the informers it reads on the agent's cache: every event of
// a BGP object, a pool or a Namespace asks it for a new decision; Services
// and Nodes reach it with the decision loop's passes.
func bgpBackend(ctx context.Context, cfg Config, informers cache.Cache, c client.Client, reg prometheus.Registerer, log *slog.Logger) (*bgpagent.Backend, error) {
	if !cfg.BGP.Enabled {
		return nil, nil
	}
	log = log.With("sub", "bgp")
	var synced []toolscache.InformerSynced
	b := bgpagent.New(bgpagent.Config{Node: cfg.NodeName, Namespace: cfg.BGP.SecretNamespace, StateDir: cfg.StateDir,
		ListenPort: cfg.BGP.ListenPort}, bgpagent.Deps{
		Reader: informers, Client: c, Router: bgpspeaker.NewGoBGP(log, bgpspeaker.KernelProber{}), Log: log, Registerer: reg,
		Conntrack: conntrack.Table{},
		// Until every informer synced, the backend decides from its state
		// file (a restart while the API server is away).
		Synced: func() bool {
			for _, s := range synced {
				if !s() {
					return false
				}
			}
			return true
		},
	})
	trigger := toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { b.Trigger() },
		UpdateFunc: func(any, any) { b.Trigger() },
		DeleteFunc: func(any) { b.Trigger() },
	}
	for _, obj := range append(bgpagent.Watched(), &corev1.Node{}) {
		inf, err := informers.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			return nil, fmt.Errorf("BGP: watching %T: %w", obj, err)
		}
		if _, isNode := obj.(*corev1.Node); !isNode {
			if _, err := inf.AddEventHandler(trigger); err != nil {
				return nil, fmt.Errorf("BGP: watching %T: %w", obj, err)
			}
		}
		synced = append(synced, inf.HasSynced)
	}
	return b, nil
}
