package failover

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"
)

// Cluster is what a run needs from Kubernetes; KubeCluster is the client-go
// implementation, tests use a fake.
type Cluster interface {
	// Endpoints returns the Service's endpoints now.
	Endpoints(ctx context.Context) ([]Endpoint, error)
	// AnnouncedBy returns the node the API says announces addr (the
	// agents' L2Announcers, internal/agent/status.Announcements), or "" when none does.
	AnnouncedBy(ctx context.Context, addr netip.Addr) (string, error)
	// WatchEndpoints calls fn with the Service's endpoints on every change
	// until ctx ends, then returns.
	WatchEndpoints(ctx context.Context, fn func([]Endpoint)) error
}

// killTimeout bounds one Killer.Kill: a kill command that hangs must not
// hang the measurement.
const killTimeout = time.Minute

// Config is how to measure.
type Config struct {
	Target  Target
	Rate    float64       // requests per second
	Timeout time.Duration // per request, connect to last byte
	Runs    int
	// Settle is the least time to wait between runs once the cluster is
	// healthy again (spread check passes, the address answers).
	Settle time.Duration
	// SettleTimeout bounds the wait for the cluster to become healthy again.
	SettleTimeout time.Duration
	// Quiet is how long errors must have stopped (and the dead node's
	// endpoints be gone) before a run ends.
	Quiet time.Duration
	// MaxRun ends a run this long after the kill whatever happened; its
	// unfinished phases are reported as lower bounds.
	MaxRun time.Duration
	// Warmup bounds the wait for the address to answer and its owner to be
	// known before the kill.
	Warmup time.Duration
	// OwnerPoll is how often the OwnerObserver is asked.
	OwnerPoll time.Duration
	// Soft says the kill leaves the node and its backends up (agent pod
	// deleted): the run does not wait for endpoints to leave.
	Soft bool
	// NoFinalRestore leaves the node killed by the last run killed (with a
	// Restorer, it is otherwise restored and the cluster awaited healthy).
	NoFinalRestore bool
}

// DefaultConfig returns the defaults of `mooring failover` for target.
func DefaultConfig(t Target) Config {
	return Config{
		Target: t, Rate: 10, Timeout: time.Second, Runs: 1,
		Settle: 5 * time.Second, SettleTimeout: 3 * time.Minute,
		Quiet: 5 * time.Second, MaxRun: 3 * time.Minute,
		Warmup: 15 * time.Second, OwnerPoll: 50 * time.Millisecond,
	}
}

// Validate checks the configuration.
func (c Config) Validate() error {
	l := Load{Target: c.Target, Rate: c.Rate, Timeout: c.Timeout, Record: func(Result) {}}
	if err := l.Validate(); err != nil {
		return err
	}
	switch {
	case c.Runs < 1:
		return fmt.Errorf("runs %d: need at least 1", c.Runs)
	case c.Quiet <= 0 || c.MaxRun <= 0 || c.Warmup <= 0 || c.OwnerPoll <= 0 || c.SettleTimeout <= 0:
		return errors.New("quiet, max-run, warmup, owner-poll and settle-timeout must be positive")
	case c.Settle < 0:
		return errors.New("settle must not be negative")
	}
	return nil
}

// Env is where the measurement plugs into the world. Killer and Cluster
// are required; the rest have defaults.
type Env struct {
	Dial     DialFunc      // nil: dial from this process's namespace
	Killer   Killer        // required
	Restorer Restorer      // optional: brings the killed node back between runs
	Owner    OwnerObserver // optional: without it there is no owner-change marker
	NodeMACs NodeMACs      // MAC → node; Cluster.AnnouncedBy is the fallback
	// Routes, when set, reads a router's next hops for the address: the
	// client is behind it (routes.go), the victim is one of them, named by
	// NodeAddrs, and phase 1 ends with its route withdrawal.
	Routes    RouteObserver
	NodeAddrs NodeAddrs
	Cluster   Cluster      // required
	Clock     Clock        // nil: RealClock
	Log       *slog.Logger // nil: discard
	// Progress, if set, is told what happens while it happens.
	Progress func(ProgressEvent)
}

// ProgressEvent is one line of progress.
type ProgressEvent struct {
	Run, Runs int
	// SinceKill is the time since the kill; negative before it.
	SinceKill time.Duration
	Text      string
}

// RunResult is one run.
type RunResult struct {
	Run                     int
	Node                    string // the killed node
	NewNode                 string // the node whose MAC took over, when known
	OwnerBefore, OwnerAfter net.HardwareAddr
	// HopsBefore names the router's next hops for the address at the kill
	// (routed runs).
	HopsBefore []string
	Timeline   Timeline
	Results    []Result
	Warnings   []string
}

// Measure runs cfg.Runs failovers and returns every finished run. An error
// stops the series; the runs finished before it are returned with it.
func Measure(ctx context.Context, cfg Config, env Env) ([]RunResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if env.Killer == nil || env.Cluster == nil {
		return nil, errors.New("failover: Env needs a Killer and a Cluster")
	}
	env = env.withDefaults()
	var out []RunResult
	for i := 1; i <= cfg.Runs; i++ {
		if i > 1 {
			if err := settle(ctx, cfg, env, i, out[len(out)-1].Node, cfg.Settle); err != nil {
				return out, fmt.Errorf("before run %d: %w", i, err)
			}
		}
		r, err := runOnce(ctx, cfg, env, i)
		if err != nil {
			return out, fmt.Errorf("run %d: %w", i, err)
		}
		out = append(out, r)
	}
	if err := finish(ctx, cfg, env, out[len(out)-1].Node); err != nil {
		return out, fmt.Errorf("after the last run: %w", err)
	}
	return out, nil
}

// LeftKilled says why the node killed by the last run stays killed, or ""
// when Measure restores it (a soft kill leaves the node up).
func LeftKilled(cfg Config, haveRestorer bool) string {
	switch {
	case cfg.Soft:
		return ""
	case !haveRestorer:
		return "no restore command was given (--restore-command)"
	case cfg.NoFinalRestore:
		return "--no-final-restore"
	}
	return ""
}

// finish brings the last killed node back and waits for a healthy
// cluster, so that the next measurement can start, or says loudly why the
// node stays killed.
func finish(ctx context.Context, cfg Config, env Env, killed string) error {
	if why := LeftKilled(cfg, env.Restorer != nil); why != "" {
		env.Log.Warn("the last killed node stays killed", "node", killed, "why", why)
		env.Progress(ProgressEvent{Run: cfg.Runs, Runs: cfg.Runs, SinceKill: -1,
			Text: fmt.Sprintf("WARNING: %s stays killed: %s", killed, why)})
		return nil
	}
	if cfg.Soft {
		return nil
	}
	return settle(ctx, cfg, env, cfg.Runs, killed, 0)
}

func (e Env) withDefaults() Env {
	if e.Dial == nil {
		e.Dial = (&net.Dialer{}).DialContext
	}
	if e.Clock == nil {
		e.Clock = RealClock{}
	}
	if e.Log == nil {
		e.Log = slog.New(slog.DiscardHandler)
	}
	if e.Progress == nil {
		e.Progress = func(ProgressEvent) {}
	}
	return e
}

// state is what the run's goroutines share.
type state struct {
	mu          sync.Mutex
	rec         Recorder
	kill        time.Time // zero before the kill
	victim      string
	ownerBefore net.HardwareAddr
	owner       net.HardwareAddr // latest non-nil MAC seen
	eps         []Endpoint
	haveEps     bool
	events      []Event
	warnings    []string
	hops        []netip.Addr // the router's next hops (routed runs)
	haveHops    bool
	routed      bool
}

// ownerSeen records a MAC observation at t.
func (s *state) ownerSeen(mac net.HardwareAddr, t time.Time, macs NodeMACs) {
	if len(mac) == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.kill.IsZero() && len(s.ownerBefore) > 0 && !bytes.Equal(mac, s.owner) {
		s.events = append(s.events, Event{Kind: EventOwnerChange, At: t,
			Detail: describeMAC(macs, s.owner) + " -> " + describeMAC(macs, mac)})
	}
	s.owner = mac
}

// endpointsSeen records the Service's endpoints at t.
func (s *state) endpointsSeen(eps []Endpoint, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eps, s.haveEps = eps, true
	s.checkGone(t)
}

// checkGone records EventEndpointsGone once, after the kill. s.mu is held.
func (s *state) checkGone(t time.Time) {
	if s.kill.IsZero() || !s.haveEps || !NodeEndpointsGone(s.eps, s.victim) {
		return
	}
	for _, e := range s.events {
		if e.Kind == EventEndpointsGone {
			return
		}
	}
	s.events = append(s.events, Event{Kind: EventEndpointsGone, At: t, Detail: "no ready endpoint left on " + s.victim})
}

func (s *state) observed(cfg Config, start, end time.Time) Observed {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Observed{Start: start, Kill: s.kill, End: end, Events: append([]Event(nil), s.events...),
		Results: s.rec.Snapshot(), EndpointsStay: cfg.Soft, Routed: s.routed}
}

func runOnce(ctx context.Context, cfg Config, env Env, run int) (RunResult, error) {
	clk := env.Clock
	say := func(since time.Duration, format string, args ...any) {
		env.Progress(ProgressEvent{Run: run, Runs: cfg.Runs, SinceKill: since, Text: fmt.Sprintf(format, args...)})
	}
	eps, err := env.Cluster.Endpoints(ctx)
	if err != nil {
		return RunResult{}, err
	}
	if err := CheckSpread(eps); err != nil {
		return RunResult{}, err
	}
	nodes, _ := ReadyNodes(eps)
	say(-1, "ready backends on %v; sending %.4g requests/s to %s", nodes, cfg.Rate, cfg.Target)

	st := &state{routed: env.Routes != nil}
	st.endpointsSeen(eps, clk.Now())
	bg, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { stop(); wg.Wait() }()
	start := clk.Now()
	load := &Load{Target: cfg.Target, Rate: cfg.Rate, Timeout: cfg.Timeout, Dial: env.Dial, Clock: clk, Record: st.rec.Add}
	wg.Go(func() { _ = load.Run(bg) })
	if env.Owner != nil {
		wg.Go(func() { pollOwner(bg, cfg, env, st) })
	}
	if env.Routes != nil {
		wg.Go(func() { pollRoutes(bg, cfg, env, st) })
	}
	wg.Go(func() {
		if err := env.Cluster.WatchEndpoints(bg, func(eps []Endpoint) { st.endpointsSeen(eps, clk.Now()) }); err != nil {
			env.Log.Warn("watching endpoints", "err", err)
		}
	})

	if err := warmup(ctx, cfg, env, st); err != nil {
		return RunResult{}, err
	}
	victim, err := pickVictim(ctx, cfg, env, st)
	if err != nil {
		return RunResult{}, err
	}

	hopsBefore, before, err := killVictim(ctx, cfg, env, st, victim, say)
	if err != nil {
		return RunResult{}, err
	}

	end, err := waitRunEnd(ctx, cfg, env, st, start, say)
	if err != nil {
		return RunResult{}, err
	}
	stop()
	wg.Wait()

	return result(cfg, env, st, run, victim, start, end, hopsBefore, before), nil
}

// killVictim records the kill, says why this node, and kills it. It
// returns the router's next hops (routed runs) and the client's view of
// the owner just before.
func killVictim(ctx context.Context, cfg Config, env Env, st *state, victim string,
	say func(time.Duration, string, ...any)) ([]string, net.HardwareAddr, error) {
	clk := env.Clock
	st.mu.Lock()
	hopsBefore := env.NodeAddrs.Nodes(st.hops)
	before := st.owner
	st.kill, st.victim, st.ownerBefore = clk.Now(), victim, before
	kill := st.kill
	st.events = append(st.events, Event{Kind: EventKill, At: kill, Detail: victim})
	st.checkGone(kill)
	st.mu.Unlock()
	switch {
	case env.Routes != nil:
		say(0, "killing %s (a next hop of %s at the router: %v)", victim, cfg.Target.Addr.Addr(), hopsBefore)
	case len(before) > 0:
		say(0, "killing %s (the client sees %s for %s)", victim, describeMAC(env.NodeMACs, before), cfg.Target.Addr.Addr())
	default:
		say(0, "killing %s (named by the agents' L2Announcers)", victim)
	}
	kctx, kcancel := context.WithTimeout(ctx, killTimeout)
	err := env.Killer.Kill(kctx, victim)
	kcancel()
	if err != nil {
		return nil, nil, fmt.Errorf("killing %s: %w", victim, err)
	}
	env.Log.Debug("kill done", "node", victim, "took", clk.Now().Sub(kill))
	return hopsBefore, before, nil
}

// result turns what the run saw into its RunResult, with warnings for
// phases that did not end.
func result(cfg Config, env Env, st *state, run int, victim string, start, end time.Time,
	hopsBefore []string, before net.HardwareAddr) RunResult {
	tl := ComputeTimeline(st.observed(cfg, start, end))
	st.mu.Lock()
	defer st.mu.Unlock()
	r := RunResult{Run: run, Node: victim, OwnerBefore: before, Timeline: tl, Results: st.rec.Snapshot(), Warnings: st.warnings}
	if env.Routes != nil {
		r.HopsBefore = hopsBefore
	}
	if !bytes.Equal(st.owner, before) {
		r.OwnerAfter = st.owner
		r.NewNode = env.NodeMACs.Node(st.owner)
	}
	if !tl.Phase1Complete && env.Routes != nil {
		r.Warnings = append(r.Warnings, fmt.Sprintf("%s did not leave the router's route (or the address did not answer again) within %s of the kill", victim, cfg.MaxRun))
	} else if !tl.Phase1Complete {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the address did not answer again within %s of the kill", cfg.MaxRun))
	} else if !tl.Phase2Complete {
		r.Warnings = append(r.Warnings, fmt.Sprintf("the endpoints of %s did not leave the EndpointSlices within %s of the kill", victim, cfg.MaxRun))
	}
	return r
}

func pollOwner(ctx context.Context, cfg Config, env Env, st *state) {
	var lastErr string
	for {
		mac, err := env.Owner.Owner(ctx, cfg.Target.Addr.Addr())
		now := env.Clock.Now()
		if err != nil && err.Error() != lastErr && ctx.Err() == nil {
			env.Log.Warn("observing the address's owner", "err", err)
			st.mu.Lock()
			st.warnings = append(st.warnings, err.Error())
			st.mu.Unlock()
		}
		if err != nil {
			lastErr = err.Error()
		}
		st.ownerSeen(mac, now, env.NodeMACs)
		select {
		case <-ctx.Done():
			return
		case <-env.Clock.After(cfg.OwnerPoll):
		}
	}
}

// warmup waits until the address answers (three successes in a row) and,
// with an observer, the owner's MAC is known.
func warmup(ctx context.Context, cfg Config, env Env, st *state) error {
	deadline := env.Clock.Now().Add(cfg.Warmup)
	for {
		rs := st.rec.Snapshot()
		ok := len(rs) >= 3
		for i := max(0, len(rs)-3); i < len(rs); i++ {
			ok = ok && rs[i].Outcome.OK()
		}
		st.mu.Lock()
		known := env.Owner == nil || len(st.owner) > 0
		st.mu.Unlock()
		if ok && known {
			return nil
		}
		if !env.Clock.Now().Before(deadline) {
			if !ok {
				return fmt.Errorf("%s does not answer before the kill (%s): nothing to measure", cfg.Target, lastFailures(rs))
			}
			// No owner seen (the client may not share the address's L2
			// segment): go on, the L2Announcers may still name the node.
			env.Log.Warn("no owner observed for the address; there will be no owner-change marker", "addr", cfg.Target.Addr.Addr())
			return nil
		}
		if err := sleep(ctx, env.Clock, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

func lastFailures(rs []Result) string {
	if len(rs) == 0 {
		return "no request finished"
	}
	counts := map[string]int{}
	var last Outcome
	for _, r := range rs {
		if !r.Outcome.OK() {
			counts[r.Outcome.Key()]++
			last = r.Outcome
		}
	}
	return fmt.Sprintf("%d requests, failures %v, last: %s", len(rs), counts, last.Detail)
}

// chooseVictim names the announcing node: by the MAC the client sees, else
// by who the API says announces (Cluster.AnnouncedBy).
func chooseVictim(ctx context.Context, cfg Config, env Env, st *state) (string, error) {
	st.mu.Lock()
	mac := st.owner
	st.mu.Unlock()
	byMAC := env.NodeMACs.Node(mac)
	ann, err := env.Cluster.AnnouncedBy(ctx, cfg.Target.Addr.Addr())
	if err != nil {
		env.Log.Warn("reading who announces the address (L2Announcers)", "err", err)
	}
	switch {
	case byMAC != "" && ann != "" && ann != byMAC:
		w := fmt.Sprintf("the client sees %s's MAC but the agents' L2Announcers say %s announces it; killing %s", byMAC, ann, byMAC)
		env.Log.Warn(w)
		st.mu.Lock()
		st.warnings = append(st.warnings, w)
		st.mu.Unlock()
		return byMAC, nil
	case byMAC != "":
		return byMAC, nil
	case ann != "":
		return ann, nil
	case len(mac) > 0:
		return "", fmt.Errorf("the client sees %s for %s, which is no known node's MAC, and no L2Announcer names the announcing node: give --node-mac node=mac for each node", mac, cfg.Target.Addr.Addr())
	}
	return "", fmt.Errorf("cannot tell which node announces %s: the client has no neighbour entry for it (is it on the same L2 segment?) and no L2Announcer names the announcing node", cfg.Target.Addr.Addr())
}

// waitRunEnd returns when the run is over: phase 1 complete, the dead
// node's endpoints gone (unless soft) and Quiet without errors — or MaxRun.
// Its progress lines come out in time order (see progressQueue).
func waitRunEnd(ctx context.Context, cfg Config, env Env, st *state, start time.Time, say func(time.Duration, string, ...any)) (time.Time, error) {
	var (
		seen     = map[string]bool{}
		lastTick time.Duration
		q        progressQueue
	)
	// What happened at t is known by t + a request's timeout (its outcome)
	// or an owner poll later, plus a tick of this loop; twice the timeout
	// and half a second more leave room for a loaded machine.
	lag := 2*cfg.Timeout + cfg.OwnerPoll + 500*time.Millisecond
	defer func() { q.flush(math.MaxInt64, say) }()
	for {
		now := env.Clock.Now()
		tl := ComputeTimeline(st.observed(cfg, start, now))
		since := now.Sub(tl.Kill)
		note := func(key string, at time.Time, format string, args ...any) {
			if !at.IsZero() && !seen[key] {
				seen[key] = true
				q.add(at.Sub(tl.Kill), fmt.Sprintf(format, args...))
			}
		}
		note("first", tl.FirstError, "first error")
		for _, e := range tl.Events {
			if e.Kind != EventKill {
				note(string(e.Kind), e.At, "%s: %s", e.Kind, e.Detail)
			}
		}
		if !tl.FirstError.IsZero() {
			note("recovered", tl.Recovered, "the address answers again")
		}
		if since-lastTick >= 5*time.Second {
			lastTick = since.Truncate(5 * time.Second)
			tot := tl.Total()
			q.add(since, fmt.Sprintf("%d requests since start, %d failed since the kill", tot.Requests, tl.Failed()))
		}
		q.flush(since-lag, say)
		quietSince := latest(tl.Kill, tl.LastError, tl.EndpointsGone)
		if tl.Phase1Complete && tl.Phase2Complete && now.Sub(quietSince) >= cfg.Quiet {
			return now, nil
		}
		if since >= cfg.MaxRun {
			q.add(since, fmt.Sprintf("giving up waiting after %s", cfg.MaxRun))
			return now, nil
		}
		if err := sleep(ctx, env.Clock, 100*time.Millisecond); err != nil {
			return now, err
		}
	}
}

// progressQueue holds progress lines until no earlier one can still turn
// up, so that they are printed in time order: an outcome is known only when
// its request ends, so a failure can be learnt after a later event.
type progressQueue struct {
	lines []progressLine
}

type progressLine struct {
	at   time.Duration // since the kill
	text string
}

func (q *progressQueue) add(at time.Duration, text string) {
	q.lines = append(q.lines, progressLine{at, text})
}

// flush says, in time order, every line at or before upTo.
func (q *progressQueue) flush(upTo time.Duration, say func(time.Duration, string, ...any)) {
	slices.SortStableFunc(q.lines, func(a, b progressLine) int { return cmp.Compare(a.at, b.at) })
	n := 0
	for n < len(q.lines) && q.lines[n].at <= upTo {
		say(q.lines[n].at, "%s", q.lines[n].text)
		n++
	}
	q.lines = q.lines[n:]
}

// settle brings the killed node back (with a Restorer) and waits until the
// cluster is healthy again — backends spread, the address answering — and
// then pause more.
func settle(ctx context.Context, cfg Config, env Env, run int, killed string, pause time.Duration) error {
	say := func(format string, args ...any) {
		env.Progress(ProgressEvent{Run: run, Runs: cfg.Runs, SinceKill: -1, Text: fmt.Sprintf(format, args...)})
	}
	if env.Restorer != nil {
		say("restoring %s", killed)
		if err := env.Restorer.Restore(ctx, killed); err != nil {
			return fmt.Errorf("restoring %s: %w", killed, err)
		}
	}
	say("waiting for the cluster to settle")
	deadline := env.Clock.Now().Add(cfg.SettleTimeout)
	var why error
	for env.Clock.Now().Before(deadline) {
		why = healthy(ctx, cfg, env)
		if why == nil {
			return sleep(ctx, env.Clock, pause)
		}
		if err := sleep(ctx, env.Clock, 500*time.Millisecond); err != nil {
			return err
		}
	}
	return fmt.Errorf("the cluster did not settle within %s: %w", cfg.SettleTimeout, why)
}

func healthy(ctx context.Context, cfg Config, env Env) error {
	eps, err := env.Cluster.Endpoints(ctx)
	if err != nil {
		return err
	}
	if err := CheckSpread(eps); err != nil {
		return err
	}
	out, _ := Probe(ctx, env.Dial, cfg.Target, cfg.Timeout)
	if !out.OK() {
		return fmt.Errorf("%s does not answer: %s", cfg.Target, out.Detail)
	}
	return nil
}

func sleep(ctx context.Context, clk Clock, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-clk.After(d):
		return nil
	}
}
