package podipamctl

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/podipam"
)

// Defaults of the pod IPAM flags.
const (
	DefaultPreAllocate    = 8
	DefaultStatusInterval = time.Second
	DefaultWorkers        = 8
)

// Config is the controller side's configuration.
type Config struct {
	// Mode is --pod-ipam-mode.
	Mode Mode
	// Namespace holds the mode ConfigMap (the controller's lease namespace).
	Namespace string
	// ClusterPoolV4/V6 and the mask sizes are cluster-pool's CIDR lists
	// (--cluster-pool-ipv4-cidr, --cluster-pool-ipv4-mask-size, ...).
	ClusterPoolV4, ClusterPoolV6 []netip.Prefix
	MaskV4, MaskV6               int
	// PreAllocate is how many addresses of the default pool every node
	// holds before its agent asks for any (multi-pool), so that the first
	// pod never waits for the controller.
	PreAllocate int
	// StatusInterval bounds pool status writes.
	StatusInterval time.Duration
	// Workers is how many nodes are reconciled at once.
	Workers int
	// DeletedNodeGrace bounds how long a deleted Node's blocks stay
	// reserved while pods still have addresses from them
	// (--pod-ipam-deleted-node-grace); 0: until those pods are gone.
	DeletedNodeGrace time.Duration
	Log              *slog.Logger
}

// clusterPool is cluster-pool's one pool. Its blocks are recorded as the
// pool "default", so that a migration to multi-pool keeps them as each
// node's first default block.
func (c *Config) clusterPool() podipam.Pool {
	return podipam.Pool{Name: DefaultPool,
		V4: podipam.FamilySpec{CIDRs: c.ClusterPoolV4, MaskSize: c.MaskV4},
		V6: podipam.FamilySpec{CIDRs: c.ClusterPoolV6, MaskSize: c.MaskV6}}
}

// DefaultPool is the pool of pods that name none, and cluster-pool's pool.
const DefaultPool = "default"

// Validate reports every unusable setting, naming the fix.
func (c *Config) Validate() error {
	if _, err := ParseMode(string(c.Mode)); err != nil {
		return err
	}
	var errs []error
	if c.Namespace == "" {
		errs = append(errs, errors.New("pod IPAM: no namespace for the mode record"))
	}
	if c.Mode == ModeClusterPool {
		if len(c.ClusterPoolV4) == 0 && len(c.ClusterPoolV6) == 0 {
			errs = append(errs, errors.New("--pod-ipam-mode=cluster-pool needs --cluster-pool-ipv4-cidr and/or --cluster-pool-ipv6-cidr"))
		}
		p := c.clusterPool()
		if err := p.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("cluster pool: %w", err))
		}
	}
	if c.PreAllocate < 0 || c.Workers < 0 || c.StatusInterval < 0 || c.DeletedNodeGrace < 0 {
		errs = append(errs, errors.New("pod IPAM: pre-allocation, workers, status interval and deleted-node grace must not be negative"))
	}
	return errors.Join(errs...)
}
