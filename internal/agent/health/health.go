package health

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/mooringlb/mooring/internal/serve"
)

// Where the decision's API state comes from (State.Source).
const (
	SourceLive     int32 = iota // the informer caches
	SourceSnapshot              // the local snapshot: the API server has not answered since start
)

// State is what /readyz reports; each flag is written by the room that
// knows it and read by the HTTP handlers.
type State struct {
	// Decided: the first decision is made, so the caches had synced and
	// the start-up gate (gossip settled) was passed.
	Decided atomic.Bool
	// NodeFound: a Node of this agent's --node-name exists.
	NodeFound atomic.Bool
	// Peers: nodes gossip should reach (with an InternalIP), not counting
	// this one.
	Peers atomic.Int32
	// Source is SourceLive or SourceSnapshot; SnapshotAt is when the
	// snapshot in use was written.
	Source     atomic.Int32
	SnapshotAt atomic.Pointer[time.Time]
	// Waiting says why the agent does not decide yet beyond the caches
	// (no usable snapshot), nil if nothing more.
	Waiting atomic.Pointer[string]
	// Holding: a returning agent's hold-down or take is not over, so it
	// is no candidate yet (internal/agent/handoff), or a stall was noticed.
	Holding atomic.Bool
}

// Probe reads State and the parts whose health /readyz includes.
type Probe struct {
	State *State
	// Node, GossipPort and HoldDown name the flags in the messages.
	Node       string
	GossipPort int
	HoldDown   time.Duration
	// Members are the live members; Deferring (nil: never) whether this
	// side of a partition defers; Responder (nil: healthy) the responder's
	// health.
	Members   func() []string
	Deferring func() bool
	Responder func() error
	// InsecureGossip: the agent gossips without a key (--insecure-gossip),
	// said in every /readyz answer.
	InsecureGossip bool
}

// insecureNote is what /readyz adds when gossip runs without a key.
const insecureNote = "gossip runs WITHOUT a key (--insecure-gossip): anyone who reaches the gossip port can join, claim addresses and spread false deaths; give the agents --gossip-key-file (docs/install.md#gossip-key)"

// Readyz is /readyz: the Node exists (Ready) and the agent serves. Once it
// decides, the text says from what: the live API state or the local
// snapshot (also beside an error: a lone survivor serves, not ready).
func (p Probe) Readyz() (string, error) {
	what := ""
	if p.State.Decided.Load() {
		what = p.ServingFrom()
	}
	if p.InsecureGossip {
		what = strings.TrimPrefix(what+"; "+insecureNote, "; ")
	}
	return what, errors.Join(p.Ready(), p.Serving())
}

// Ready reports whether the agent can announce: its --node-name names a
// Node it has seen.
func (p Probe) Ready() error {
	if !p.State.NodeFound.Load() {
		return fmt.Errorf("no Node named %q: check --node-name (the DaemonSet sets it from spec.nodeName)", p.Node)
	}
	return nil
}

// ServingFrom says where the decision's API state comes from.
func (p Probe) ServingFrom() string {
	if p.State.Source.Load() == SourceSnapshot {
		at := "?"
		if t := p.State.SnapshotAt.Load(); t != nil {
			at = t.UTC().Format(time.RFC3339)
		}
		return fmt.Sprintf("serving from the local snapshot written %s: the API server has not answered since this agent started", at)
	}
	return "serving from the live API state"
}

// Serving returns nil when the agent serves: caches synced, gossip joined
// (when there is anyone to join), its first decision applied, and every
// interface it must answer on open; else every reason it does not. The
// DaemonSet's readiness probe reads it, so a rolling update moves to the
// next node only once this one serves again (make-before-break across
// nodes).
func (p Probe) Serving() error {
	var errs []error
	if !p.State.Decided.Load() {
		errs = append(errs, errors.New("not deciding yet: waiting for the informer caches to sync and for gossip to settle"))
		if w := p.State.Waiting.Load(); w != nil {
			errs = append(errs, errors.New(*w))
		}
	}
	if n := p.State.Peers.Load(); n > 0 && len(p.Members()) < 2 {
		errs = append(errs, fmt.Errorf("gossip reaches none of the %d other nodes (port %d blocked, or a wrong key?)", n, p.GossipPort))
	}
	if p.State.Holding.Load() {
		// Not ready until it has taken its addresses back: a rolling
		// update then stops the next agent only once this one serves, so
		// every address always has a candidate.
		errs = append(errs, fmt.Errorf("holding down after a restart or a drain (--hold-down %s): peers serve this node's addresses until it takes them back", p.HoldDown))
	}
	if p.Deferring != nil && p.Deferring() {
		errs = append(errs, errors.New("deferring: gossip is cut from most nodes while their kernels answer (a partition); this side is not the majority and announces nothing"))
	}
	if p.Responder != nil {
		if err := p.Responder(); err != nil {
			if !strings.HasPrefix(err.Error(), "responder:") { // its own errors say so already
				err = fmt.Errorf("responder: %w", err)
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Serve serves /metrics from reg, /healthz and /readyz (ready) on addr
// until ctx ends; an empty addr serves nothing.
func Serve(ctx context.Context, addr string, reg *prometheus.Registry, ready func() (string, error), log *slog.Logger) error {
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
	return listen(ctx, "--metrics-addr", addr, mux, "serving metrics", log)
}

// listen serves h on addr until ctx ends; flag names the address in an
// error.
func listen(ctx context.Context, flag, addr string, h http.Handler, what string, log *slog.Logger) error {
	srv := &http.Server{Addr: addr, Handler: h, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	log.Info(what, "addr", ln.Addr().String())
	return serve.HTTP(ctx, srv, ln)
}

// ServePprof serves Go's profiles (net/http/pprof) at addr until ctx ends;
// an empty addr serves nothing. It is its own listener, never the metrics
// one: profiles are for an operator on the node, not for every scraper.
func ServePprof(ctx context.Context, addr string, log *slog.Logger) error {
	if addr == "" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	return listen(ctx, "--pprof-addr", addr, mux, "serving Go profiles", log)
}
