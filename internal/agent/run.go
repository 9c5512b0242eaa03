package agent

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/sync/errgroup"
	corev1 "k8s.io/api/core/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/clock"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/membership"
	"github.com/mooringlb/mooring/internal/responder"
	"github.com/mooringlb/mooring/internal/serve"
)

// Run runs the agent until ctx ends: informer caches, gossip, the
// responder, the decision loop, status writes, safety checks and the
// metrics server. It owns every goroutine it starts and returns after all
// of them have stopped.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		cfg.Log = log
	}
	kube.BridgeLogs(log)
	tuneGC() // mem_release.go
	restCfg, err := kube.RESTConfig(cfg.Kubeconfig, cfg.QPS, cfg.Burst)
	if err != nil {
		return err
	}
	scheme := kube.Scheme()
	informers, err := cache.New(restCfg, cache.Options{Scheme: scheme, ByObject: withAnnouncers(transforms()), Mapper: cacheMapper(scheme)})
	if err != nil {
		return fmt.Errorf("creating the informer cache: %w", err)
	}
	// Services and EndpointSlices are kept compactly (mem_store.go).
	compact, err := newCompactCache(restCfg)
	if err != nil {
		return err
	}
	writer, err := client.New(restCfg, client.Options{Scheme: scheme})
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
	var silent func() bool // the agent's stall gate (handoff.go), set before resp.Run
	resp := responder.New(responder.Config{GratuitousCount: cfg.GratuitousCount, GratuitousInterval: cfg.GratuitousInterval,
		Silent: func() bool { return silent() }}, log.With("sub", "responder"), reg)
	src := newSwitchReader(compactReader{informers, compact.store}) // snapshot_reader.go, mem_store.go
	a := New(cfg, Deps{
		Reader: src, Client: writer, Members: failSafe{mem}, Responder: resp, // partition.go
		Links: netlinkLinks{}, Sysctls: procSysctls{root: "/proc/sys"}, Prober: rawProber{},
		Clock: clock.RealClock{}, Registerer: reg,
		NodeCheck: NodeCheck(kernelCheck(cfg.NodeCheckWait)), Conntrack: conntrack.Delete,
	})
	silent = a.stalled
	compact.notify(a.dirty)
	if err := watch(ctx, informers, a.dirty, a.deferrals.handler(clock.RealClock{})); err != nil {
		return err
	}

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return informers.Start(ctx) })
	g.Go(func() error { return compact.Run(ctx) })
	g.Go(func() error { releaseAfterStart(ctx, a, clock.RealClock{}, log); return nil }) // mem_release.go
	// On SIGTERM (a rolling update, a drain) the responder closes first and
	// only then does gossip leave, so peers take over at once from a node
	// that no longer answers: never two responders, nothing sent after the
	// leave (handoff.go).
	answering := make(chan struct{})
	g.Go(func() error { defer close(answering); return resp.Run(ctx) })
	g.Go(func() error { return mem.Run(afterClosed(ctx, answering)) })
	g.Go(func() error { return serveMetrics(ctx, cfg.MetricsAddr, reg, a.readyz, log) })
	g.Go(func() error { watchLinks(ctx, netlinkLinks{}, a.Trigger, log); return nil })
	g.Go(func() error { return runPodIPAM(ctx, &cfg, restCfg) })
	// The first decision must see complete caches (a partial Service list
	// would withdraw addresses for a moment), or a whole snapshot.
	g.Go(func() error { return a.startFrom(ctx, allSynced{informers, compact}, src) }) // snapshot.go
	return g.Wait()
}

// watch registers the informers the decision reads: Node and policy
// events mark the (few) Nodes or policies for re-reading. Services and
// EndpointSlices are watched by the compact cache (mem_watch.go).
func watch(ctx context.Context, c cache.Cache, d *dirty, announcers toolscache.ResourceEventHandler) error {
	for _, w := range []struct {
		obj client.Object
		h   toolscache.ResourceEventHandler
	}{
		{&mooringv1.L2AnnouncementPolicy{}, d.flagHandler(func(c *changed) { c.policies = true })},
		{&corev1.Node{}, d.flagHandler(func(c *changed) { c.nodes = true })},
		{&mooringv1.L2Announcer{}, announcers}, // peers' deferrals (partition.go)
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

func serveMetrics(ctx context.Context, addr string, reg *prometheus.Registry, ready func() (string, error), log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		what, err := ready()
		if err != nil {
			if what != "" {
				what = "\n(" + what + ")"
			}
			http.Error(w, err.Error()+what, http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok: " + what + "\n"))
	})
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("--metrics-addr %s: %w", addr, err)
	}
	log.Info("serving metrics", "addr", ln.Addr().String())
	return serve.HTTP(ctx, srv, ln)
}
