package controller

import (
	"context"
	"fmt"
	"net/http"

	"github.com/go-logr/logr"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/serve"
)

// The permissions below are all the controller uses; an integration test
// runs it with exactly this role and fails on anything missing or extra.
// Core events in the lease namespace are leader election's "became leader"
// Events (client-go's leader elector still uses the core API); Service
// Events go through events.k8s.io.
//
// +kubebuilder:rbac:roleName=mooring-controller,groups="",resources=services,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller,groups="",resources=services/status,verbs=patch
// +kubebuilder:rbac:roleName=mooring-controller,groups="",resources=namespaces,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller,groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller,groups=mooring.dev,resources=l2announcementpolicies,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller,groups=mooring.dev,resources=l2announcers,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller,groups=mooring.dev,resources=loadbalancerippools,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-controller,groups=mooring.dev,resources=loadbalancerippools/status,verbs=patch
// +kubebuilder:rbac:roleName=mooring-controller,groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:roleName=mooring-controller,groups=coordination.k8s.io,namespace=mooring-system,resources=leases,verbs=get;create;update
// +kubebuilder:rbac:roleName=mooring-controller,groups="",namespace=mooring-system,resources=events,verbs=create;patch

// EventReporter is the reportingController of the Events Mooring emits.
const EventReporter = "mooring-controller"

// Run runs the LB-IPAM controller until ctx ends. Only the replica holding
// the Lease allocates; the others wait. It returns nil on a clean stop.
//
// Run does not touch klog's and controller-runtime's global loggers: the
// binary bridges them once at start (kube.BridgeLogs), before any client
// exists, because setting them while clients run is a data race.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if err := lockPodIPAMMode(ctx, &cfg); err != nil {
		return err
	}
	rec := &lateRecorder{}
	lock, err := leaseLock(&cfg, rec)
	if err != nil {
		return err
	}
	mgr, err := ctrl.NewManager(cfg.REST, managerOptions(&cfg, lock))
	if err != nil {
		return fmt.Errorf("controller: build manager: %w", err)
	}
	// Leader election's Events use the core API, as client-go's elector
	// does; controller-runtime's own lock gets the same recorder.
	rec.set(mgr.GetEventRecorderFor(lock.Identity())) //nolint:staticcheck
	reg := cfg.Registerer
	if reg == nil {
		reg = ctrlmetrics.Registry
	}
	if err := wire(mgr, &cfg, newState(newMetrics(reg))); err != nil {
		return err
	}
	if err := setupPodIPAM(mgr, &cfg); err != nil {
		return err
	}
	cfg.Log.Info("starting LB-IPAM controller", "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName,
		"defaultClass", cfg.DefaultClass, "adoptOnly", cfg.AdoptOnly, "workers", cfg.Workers)
	return mgr.Start(ctx)
}

func managerOptions(cfg *Config, lock resourcelock.Interface) manager.Options {
	o := manager.Options{
		Scheme:                              kube.Scheme(),
		Logger:                              logr.FromSlogHandler(cfg.Log.Handler()),
		LeaderElection:                      true,
		LeaderElectionResourceLock:          "leases",
		LeaderElectionResourceLockInterface: lock, // mode.go: the Lease carries the mode
		LeaderElectionNamespace:             cfg.LeaseNamespace,
		LeaderElectionID:                    cfg.LeaseName,
		LeaderElectionReleaseOnCancel:       true, // a restarted replica takes over at once
		Metrics: metricsserver.Options{BindAddress: cfg.MetricsAddr,
			// The same version and commit as `mooring version`.
			ExtraHandlers: map[string]http.Handler{"/version": serve.VersionHandler()}},
		HealthProbeBindAddress: cfg.HealthAddr,
		PprofBindAddress:       cfg.PprofAddr,
		// Run may be called more than once in a process (tests restart it).
		Controller: config.Controller{SkipNameValidation: ptr.To(true)},
	}
	if cfg.LeaseDuration > 0 {
		o.LeaseDuration = ptr.To(cfg.LeaseDuration)
	}
	if cfg.RenewDeadline > 0 {
		o.RenewDeadline = ptr.To(cfg.RenewDeadline)
	}
	if cfg.RetryPeriod > 0 {
		o.RetryPeriod = ptr.To(cfg.RetryPeriod)
	}
	return o
}

// wire adds the start-up import, the two controllers and the pool status
// writer to mgr; all of them run only while this replica leads.
func wire(mgr manager.Manager, cfg *Config, st *state) error {
	log := cfg.Log.With("component", "lbipam")
	c := mgr.GetClient()
	steps := []func() error{
		func() error {
			return mgr.Add(&startup{cache: mgr.GetCache(), c: c, st: st, log: log, classes: cfg.classes()})
		},
		func() error {
			return mgr.Add(&poolStatusWriter{c: c, st: st, clock: cfg.clock(), log: log, interval: cfg.PoolStatusInterval})
		},
		func() error { return (&poolReconciler{c: c, st: st}).setup(mgr) },
		func() error {
			r := &serviceReconciler{c: c, st: st, rec: mgr.GetEventRecorder(EventReporter), clock: cfg.clock(), log: log, classes: cfg.classes()}
			return r.setup(mgr, cfg.Workers)
		},
		func() error { return mgr.AddHealthzCheck("ping", healthz.Ping) },
		func() error { return mgr.AddReadyzCheck("ping", healthz.Ping) },
	}
	for _, step := range steps {
		if err := step(); err != nil {
			return fmt.Errorf("controller: set up: %w", err)
		}
	}
	return nil
}
