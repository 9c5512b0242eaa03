package agent

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/backend"
	"github.com/mooringlb/mooring/internal/agent/gossip"
	"github.com/mooringlb/mooring/internal/agent/handoff"
	"github.com/mooringlb/mooring/internal/agent/health"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/agent/ipam"
	"github.com/mooringlb/mooring/internal/agent/memory"
	"github.com/mooringlb/mooring/internal/agent/snapshot"
	"github.com/mooringlb/mooring/internal/agent/store"
	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/membership"
	"github.com/mooringlb/mooring/internal/responder"
)

// Run runs the agent until ctx ends: informer caches, gossip, the
// responder, the decision loop, status writes, safety checks and the
// metrics server. It owns every goroutine it starts and returns after all
// of them have stopped.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	log := cfg.Log
	kube.BridgeLogs(log)
	memory.TuneGC()
	memory.TuneProfiling(cfg.PprofAddr != "")
	restCfg, err := kube.RESTConfig(cfg.Kubeconfig, cfg.QPS, cfg.Burst)
	if err != nil {
		return err
	}
	scheme := kube.Scheme()
	hc, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		return err
	}
	// The cache maps its kinds without discovery (kube.StaticMapper): the
	// default mapper discovers them when the cache is created, which fails
	// while the API server is unreachable, and an agent starting then
	// would exit instead of serving from its snapshot.
	informers, err := cache.New(restCfg, cache.Options{Scheme: scheme, HTTPClient: hc, ByObject: store.Transforms(), Mapper: kube.StaticMapper(scheme)})
	if err != nil {
		return fmt.Errorf("creating the informer cache: %w", err)
	}
	// Services and EndpointSlices are kept compactly (internal/agent/store).
	compact, err := store.NewCache(restCfg)
	if err != nil {
		return err
	}
	// The writer maps its kinds without discovery too (kube.StaticMapper):
	// a write during an API outage must not hold up the others.
	mapper, err := kube.StaticFirstMapper(scheme, restCfg, hc)
	if err != nil {
		return err
	}
	writer, err := client.New(restCfg, client.Options{Scheme: scheme, HTTPClient: hc, Mapper: mapper})
	if err != nil {
		return fmt.Errorf("creating the API client: %w", err)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Parts log under sub=: log already carries component=agent.
	mem, err := membership.New(cfg.membershipConfig(), log.With("sub", "membership"), reg)
	if err != nil {
		return err
	}
	var silent func() bool // the agent's stall gate (internal/agent/handoff), set before resp.Run
	resp := responder.New(responder.Config{GratuitousCount: cfg.GratuitousCount, GratuitousInterval: cfg.GratuitousInterval,
		Silent: func() bool { return silent() }}, log.With("sub", "responder"), reg)
	src := snapshot.NewSwitchReader(store.NewReader(informers, compact.Store()))
	var backends []backend.Backend
	if b, err := bgpBackend(ctx, cfg, informers, writer, reg, log); err != nil {
		return err
	} else if b != nil {
		backends = append(backends, b)
	}
	a := New(cfg, Deps{
		Reader: src, Client: writer, Members: gossip.FailSafe{Membership: mem}, Responder: resp,
		Links: host.Links{}, Sysctls: host.Sysctls{Root: "/proc/sys"}, Prober: host.Prober{},
		Clock: clock.RealClock{}, Registerer: reg,
		NodeCheck: host.KernelCheck(cfg.NodeCheckWait), Conntrack: conntrack.Delete, Backends: backends,
	})
	silent = a.stalled
	compact.Notify(a.dirty.service, func() { a.dirty.mark(func(c *changed) { c.all = true }) })
	if err := watch(ctx, informers, a.dirty, a.deferrals.Handler(clock.RealClock{})); err != nil {
		return err
	}
	return a.runAll(ctx, runParts{informers: informers, compact: compact, resp: resp, mem: mem, reg: reg, src: src, restCfg: restCfg})
}

// runParts are what Run built for runAll.
type runParts struct {
	informers cache.Cache
	compact   *store.Cache
	resp      *responder.Manager
	mem       *membership.Membership
	reg       *prometheus.Registry
	src       *snapshot.SwitchReader
	restCfg   *rest.Config
}

// runAll runs every part until ctx ends and returns when all have stopped.
func (a *Agent) runAll(ctx context.Context, p runParts) error {
	cfg, log := a.cfg, a.log
	g, ctx := errgroup.WithContext(ctx)
	// On SIGTERM (a rolling update, a drain) the agent first hands its
	// addresses over while it still answers (leave.go); stay ends after
	// that. Then the responder closes, and only then does gossip leave:
	// nothing answered after the leave (internal/agent/handoff).
	stay := a.lingering(ctx)
	g.Go(func() error { return untilDone(stay, informerGrace, p.informers.Start) })
	g.Go(func() error { return untilDone(stay, informerGrace, p.compact.Run) })
	g.Go(func() error { memory.ReleaseAfterStart(ctx, a.ready.Decided.Load, clock.RealClock{}, log); return nil })
	g.Go(func() error { memory.NewLimitWatch(p.reg, log).Run(ctx, clock.RealClock{}); return nil })
	answering := make(chan struct{})
	g.Go(func() error { defer close(answering); return p.resp.Run(stay) })
	g.Go(func() error { return p.mem.Run(handoff.AfterClosed(stay, answering)) })
	g.Go(func() error { return health.Serve(ctx, cfg.MetricsAddr, p.reg, a.readyz, log) })
	g.Go(func() error { return health.ServePprof(ctx, cfg.PprofAddr, log) })
	g.Go(func() error { watchLinks(ctx, host.Links{}, a.Trigger, log); return nil })
	g.Go(func() error {
		return ipam.Run(ctx, cfg.PodIPAM, cfg.NodeName, p.restCfg, p.reg, log.With("sub", "podipam"))
	})
	// The first decision must see complete caches (a partial Service list
	// would withdraw addresses for a moment), or a whole snapshot.
	g.Go(func() error { return a.startFrom(stay, store.AllSynced{p.informers, p.compact}, p.src) })
	return g.Wait()
}

// informerGrace is how long a stopping agent waits for its informers.
const informerGrace = time.Second

// untilDone runs run on ctx and returns its error, or nil once ctx has
// ended and run has not returned within grace: with the API server away,
// client-go's reflectors sleep out their retry backoff (up to ~30 s) before
// they notice the end, and nothing they hold matters to an agent that
// stops (a kubelet would kill it after its grace period).
func untilDone(ctx context.Context, grace time.Duration, run func(context.Context) error) error {
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	select {
	case err := <-done:
		return err
	case <-time.After(grace):
		return nil
	}
}

// watch registers the informers the decision reads: Node and policy
// events mark the (few) Nodes or policies for re-reading. Services and
// EndpointSlices are watched by the compact cache (internal/agent/store).
func watch(ctx context.Context, c cache.Cache, d *dirty, announcers toolscache.ResourceEventHandler) error {
	for _, w := range []struct {
		obj client.Object
		h   toolscache.ResourceEventHandler
	}{
		{&mooringv1.L2AnnouncementPolicy{}, d.flagHandler(func(c *changed) { c.policies = true })},
		{&corev1.Node{}, d.flagHandler(func(c *changed) { c.nodes = true })},
		{&mooringv1.L2Announcer{}, announcers}, // peers' deferrals (internal/agent/gossip)
	} {
		inf, err := c.GetInformer(ctx, w.obj, cache.BlockUntilSynced(false))
		if err != nil {
			return fmt.Errorf("watching %T: %w", w.obj, err)
		}
		if _, err := inf.AddEventHandler(w.h); err != nil {
			return fmt.Errorf("watching %T: %w", w.obj, err)
		}
	}
	return nil
}

// watchLinks re-subscribes after netlink errors, with a pause, until ctx
// ends; interface changes matter to the decision (a new ifindex after a
// link is recreated).
func watchLinks(ctx context.Context, l Links, trigger func(), log *slog.Logger) {
	for ctx.Err() == nil {
		if err := l.Watch(ctx, trigger); err != nil {
			log.Warn("watching interfaces; retrying", "err", err)
		}
		trigger() // changes may have been missed
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}
