// Package controller is the `mooring controller` verb: flags into a
// controller.Config, then controller.Run. No logic lives here.
package controller

import (
	"log/slog"

	"github.com/spf13/cobra"
	"k8s.io/client-go/rest"

	"github.com/mooringlb/mooring/internal/cliutil"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/kube"
)

// flags are the command line of `mooring controller`.
type flags struct {
	kubeconfig string
	qps        float32
	burst      int
	cfg        controller.Config
	podIPAM    podIPAMFlags
}

// validate checks the flags' values before any client is built (a usage
// error when wrong): the controller's and pod IPAM's own checks, on a
// stand-in client config that carries the flags' rate limits.
func (f *flags) validate() error {
	cfg := f.cfg
	cfg.REST, cfg.Log = &rest.Config{QPS: f.qps, Burst: f.burst}, slog.New(slog.DiscardHandler)
	if err := cfg.Validate(); err != nil {
		return err
	}
	pod, err := f.podIPAM.config()
	if err != nil {
		return err
	}
	pod.Namespace = f.cfg.LeaseNamespace
	return pod.Validate()
}

// NewCommand builds `mooring controller`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	f := &flags{cfg: controller.Config{
		DefaultClass:       true,
		LeaseNamespace:     controller.DefaultLeaseNamespace,
		LeaseName:          controller.DefaultLeaseName,
		Workers:            controller.DefaultWorkers,
		PoolStatusInterval: controller.DefaultPoolStatusInterval,
		MetricsAddr:        ":8080",
		HealthAddr:         ":8081",
	}}
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Assign addresses from LoadBalancerIPPools to Services of type LoadBalancer (LB-IPAM)",
		Long: `Run the LB-IPAM controller. One replica is active at a time (leader election on a
single Lease); it imports every address Services already hold, then assigns
addresses to LoadBalancer Services with no loadBalancerClass (unless
--default-class=false) or with class mooring.dev/lb.`,
		Args:    cobra.NoArgs,
		PreRunE: func(*cobra.Command, []string) error { return f.validate() },
		RunE: func(cmd *cobra.Command, _ []string) error {
			kube.BridgeLogs(deps.Log) // process globals: once, before any client
			rest, err := kube.RESTConfig(f.kubeconfig, f.qps, f.burst)
			if err != nil {
				return err
			}
			cfg := f.cfg
			cfg.REST, cfg.Log = rest, deps.Log
			if cfg.PodIPAM, err = f.podIPAM.config(); err != nil {
				return err
			}
			if err := cfg.Validate(); err != nil {
				return err
			}
			return controller.Run(cmd.Context(), cfg)
		},
	}
	cliutil.AddKubeconfigFlag(cmd, &f.kubeconfig)
	fl := cmd.Flags()
	fl.Float32Var(&f.qps, "kube-api-qps", controller.DefaultQPS, "client-side limit of API requests per second")
	fl.IntVar(&f.burst, "kube-api-burst", controller.DefaultBurst, "client-side burst of API requests")
	fl.BoolVar(&f.cfg.DefaultClass, "default-class", f.cfg.DefaultClass, "serve Services that set no spec.loadBalancerClass")
	fl.BoolVar(&f.cfg.AdoptOnly, "adopt-only", false, "migration mode: record the addresses of Services without a class but write and allocate nothing for them (another controller still serves them)")
	fl.StringVar(&f.cfg.LeaseNamespace, "lease-namespace", f.cfg.LeaseNamespace, "namespace of the leader-election Lease")
	fl.StringVar(&f.cfg.LeaseName, "lease-name", f.cfg.LeaseName, "name of the leader-election Lease")
	fl.DurationVar(&f.cfg.LeaseDuration, "lease-duration", 0, "leader-election lease duration (0: 15s)")
	fl.DurationVar(&f.cfg.RenewDeadline, "lease-renew-deadline", 0, "leader-election renew deadline (0: 10s)")
	fl.DurationVar(&f.cfg.RetryPeriod, "lease-retry-period", 0, "leader-election retry period (0: 2s)")
	fl.IntVar(&f.cfg.Workers, "workers", f.cfg.Workers, "Services reconciled concurrently")
	fl.DurationVar(&f.cfg.PoolStatusInterval, "pool-status-interval", f.cfg.PoolStatusInterval, "minimum time between two pool status recomputations")
	cliutil.AddMetricsAddrFlag(cmd, &f.cfg.MetricsAddr, f.cfg.MetricsAddr)
	cliutil.AddPprofAddrFlag(cmd, &f.cfg.PprofAddr)
	fl.StringVar(&f.cfg.HealthAddr, "health-addr", f.cfg.HealthAddr, "address to serve /healthz and /readyz on (host:port); \"0\" disables it")
	f.podIPAM.bind(fl)
	return cmd
}
