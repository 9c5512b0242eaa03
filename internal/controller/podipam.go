package controller

import (
	"context"
	"fmt"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// lockPodIPAMMode checks --pod-ipam-mode against the mode recorded in the
// cluster before leader election: a replica started with the wrong mode
// exits at once instead of waiting for the lease (see podipamctl.LockMode).
func lockPodIPAMMode(ctx context.Context, cfg *Config) error {
	c, err := client.New(cfg.REST, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		return fmt.Errorf("controller: pod IPAM mode check: %w", err)
	}
	pc := podIPAMConfig(cfg)
	if err := pc.Validate(); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	if err := podipamctl.LockMode(ctx, c, cfg.LeaseNamespace, pc.Mode, EventReporter); err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	return nil
}

// setupPodIPAM adds pod IPAM's leader-only controllers to mgr.
func setupPodIPAM(mgr manager.Manager, cfg *Config) error {
	if err := podipamctl.Setup(mgr, podIPAMConfig(cfg)); err != nil {
		return fmt.Errorf("controller: pod IPAM: %w", err)
	}
	return nil
}

func podIPAMConfig(cfg *Config) podipamctl.Config {
	pc := cfg.PodIPAM
	if pc.Mode == "" {
		pc.Mode = podipamctl.ModeOff
	}
	pc.Namespace, pc.Log = cfg.LeaseNamespace, cfg.Log
	return pc
}
