package controller

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/utils/clock"

	"github.com/mooringlb/mooring/internal/podipamctl"
)

// Defaults for the flags of `mooring controller`.
const (
	DefaultLeaseNamespace = "mooring-system"
	DefaultLeaseName      = "mooring-controller"
	// DefaultWorkers overlaps API round trips: the allocation itself is
	// serialised and takes microseconds; a status patch takes milliseconds.
	// 32 workers assigned 10,000 Services ~30% faster than 8 on 2 cores.
	DefaultWorkers = 32
	// DefaultQPS and DefaultBurst are the client-side limits of each client
	// (status patches and Events have one each). A converged cluster sends
	// nothing; they bound bursts such as start-up with thousands pending.
	DefaultQPS   = 500
	DefaultBurst = 1000
	// DefaultPoolStatusInterval bounds pool status writes: usage is
	// recomputed at most once per interval, so a burst of 10,000 allocations
	// costs a handful of pool writes, not 10,000.
	DefaultPoolStatusInterval = time.Second
)

// Config is everything Run needs. The CLI fills it from flags; tests fill it
// directly.
type Config struct {
	// REST is the client config (rate limits included). Required.
	REST *rest.Config
	// Log receives the controller's and controller-runtime's logs. Required.
	Log *slog.Logger

	// DefaultClass makes Services without spec.loadBalancerClass ours.
	DefaultClass bool
	// AdoptOnly (with DefaultClass) is the migration mode: Services without
	// a class are only adopted — the addresses they hold and request are
	// recorded, so nothing else is ever given them — but Mooring writes
	// nothing to them and allocates nothing for them, because another
	// controller (MetalLB, Cilium) still serves them. Services of class
	// mooring.dev/lb are served as usual. Turn it off once the other
	// controller is gone; mooring_lbipam_adopt_only_services says whether
	// every adopted address lies in a pool.
	AdoptOnly bool

	// LeaseNamespace and LeaseName name the single Lease that elects the
	// one active replica.
	LeaseNamespace string
	LeaseName      string
	// LeaseDuration, RenewDeadline and RetryPeriod are the leader-election
	// timers; zero means controller-runtime's defaults (15 s, 10 s, 2 s).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration

	// Workers is how many Services are reconciled at once. Allocation is
	// serialised anyway; workers overlap the API round trips.
	Workers int

	// PoolStatusInterval is the minimum time between two pool status
	// recomputations (see DefaultPoolStatusInterval).
	PoolStatusInterval time.Duration

	// MetricsAddr and HealthAddr are the listen addresses of the metrics and
	// health endpoints; "0" disables one.
	MetricsAddr, HealthAddr string
	// PprofAddr serves Go's profiles (net/http/pprof); empty: off.
	PprofAddr string
	// Registerer receives Mooring's metrics. Nil means controller-runtime's
	// registry, which the metrics endpoint serves.
	Registerer prometheus.Registerer

	// Clock stamps condition transition times; nil means the real clock.
	Clock clock.PassiveClock

	// PodIPAM configures pod IPAM (internal/podipamctl); its zero value is
	// mode off. Namespace and Log are taken from this Config.
	PodIPAM podipamctl.Config
}

// Validate reports the first unusable setting, naming the fix.
func (c *Config) Validate() error {
	switch {
	case c.REST == nil:
		return errors.New("controller: no Kubernetes client config: pass --kubeconfig or run in a cluster")
	case c.Log == nil:
		return errors.New("controller: no logger")
	case c.LeaseNamespace == "" || c.LeaseName == "":
		return errors.New("controller: --lease-namespace and --lease-name must not be empty")
	case c.AdoptOnly && !c.DefaultClass:
		return errors.New("controller: --adopt-only concerns Services without a loadBalancerClass, which --default-class=false leaves alone already: drop one of the two flags")
	case c.Workers < 1:
		return fmt.Errorf("controller: --workers %d: use 1 or more", c.Workers)
	case c.PoolStatusInterval < 0:
		return fmt.Errorf("controller: pool status interval %s must not be negative", c.PoolStatusInterval)
	case c.REST.QPS < 0 || c.REST.Burst < 0:
		return errors.New("controller: --kube-api-qps and --kube-api-burst must not be negative")
	}
	return nil
}

func (c *Config) classes() classes {
	return classes{defaultClass: c.DefaultClass, adoptOnly: c.AdoptOnly}
}

func (c *Config) clock() clock.PassiveClock {
	if c.Clock == nil {
		return clock.RealClock{}
	}
	return c.Clock
}
