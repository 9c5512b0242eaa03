package failover

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// This file is the routed case: a client behind a router that holds the
// address as a (BGP, ECMP) route over the nodes advertising it, as in the
// BGP lab. There the client sees the router's MAC, never a node's; what
// moves on a node's loss is the route. So the run reads the router's next
// hops for the address (Env.Routes), kills one of them, and marks the
// moment its next hop leaves the route (EventRouteWithdrawn). Phase 1 is
// then "the route withdrawal" as the client saw it: from the kill to the
// first answer after the last unanswered request sent before the
// withdrawal — with ECMP some requests still succeed through the other
// next hops while the dead one is in the route, so "the first answer" of
// the L2 case would end phase 1 at once. Failures after the withdrawal are
// the stale endpoints' (phase 2).

// EventRouteWithdrawn: the killed node's next hop left the router's route
// for the address.
const EventRouteWithdrawn EventKind = "route-withdrawn"

// RouteObserver reads the next hops a router uses for an address, sorted;
// none when it has no route.
type RouteObserver interface {
	Nexthops(ctx context.Context, addr netip.Addr) ([]netip.Addr, error)
}

// RouteObserverFunc adapts a function to RouteObserver.
type RouteObserverFunc func(ctx context.Context, addr netip.Addr) ([]netip.Addr, error)

// Nexthops calls f.
func (f RouteObserverFunc) Nexthops(ctx context.Context, addr netip.Addr) ([]netip.Addr, error) {
	return f(ctx, addr)
}

// NodeAddrs names the node of each next-hop address.
type NodeAddrs map[netip.Addr]string

// Nodes names the nodes of next hops, in order; an unknown address is
// written as itself.
func (m NodeAddrs) Nodes(hops []netip.Addr) []string {
	out := make([]string, 0, len(hops))
	for _, a := range hops {
		if n, ok := m[a]; ok {
			out = append(out, n)
		} else {
			out = append(out, a.String())
		}
	}
	return out
}

// routePoll is how often the router's route is read: a netlink dump of one
// route costs well under a millisecond.
const routePoll = 10 * time.Millisecond

// pollRoutes reads the router's next hops for the address until ctx ends,
// and records EventRouteWithdrawn once the victim's last next hop is gone
// after the kill.
func pollRoutes(ctx context.Context, cfg Config, env Env, st *state) {
	var lastErr string
	for {
		hops, err := env.Routes.Nexthops(ctx, cfg.Target.Addr.Addr())
		now := env.Clock.Now()
		if err != nil && err.Error() != lastErr && ctx.Err() == nil {
			env.Log.Warn("reading the router's route for the address", "err", err)
			st.mu.Lock()
			st.warnings = append(st.warnings, err.Error())
			st.mu.Unlock()
		}
		if err != nil {
			lastErr = err.Error()
		} else {
			st.hopsSeen(hops, now, env.NodeAddrs)
		}
		select {
		case <-ctx.Done():
			return
		case <-env.Clock.After(routePoll):
		}
	}
}

// hopsSeen records the router's next hops at t.
func (s *state) hopsSeen(hops []netip.Addr, t time.Time, names NodeAddrs) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hops, s.haveHops = hops, true
	if s.kill.IsZero() || s.victim == "" || slices.ContainsFunc(s.events, func(e Event) bool { return e.Kind == EventRouteWithdrawn }) {
		return
	}
	if !slices.Contains(names.Nodes(hops), s.victim) {
		s.events = append(s.events, Event{Kind: EventRouteWithdrawn, At: t,
			Detail: fmt.Sprintf("%s left the route: next hops %s", s.victim, strings.Join(names.Nodes(hops), " "))})
	}
}

// chooseRouted names the node to kill in the routed case: a next hop of
// the address at the router that holds a ready backend (as the L2 lab's
// announcer does, so the run shows both phases), else any next hop; the
// first by name.
func chooseRouted(cfg Config, env Env, st *state) (string, error) {
	st.mu.Lock()
	hops, have, eps := st.hops, st.haveHops, st.eps
	st.mu.Unlock()
	if !have || len(hops) == 0 {
		return "", fmt.Errorf("the router has no route for %s: nothing advertises it", cfg.Target.Addr.Addr())
	}
	var nodes []string
	for _, a := range hops {
		if n, ok := env.NodeAddrs[a]; ok && !slices.Contains(nodes, n) {
			nodes = append(nodes, n)
		}
	}
	if len(nodes) == 0 {
		return "", fmt.Errorf("the router's next hops %v for %s are no known node's address", hops, cfg.Target.Addr.Addr())
	}
	slices.Sort(nodes)
	backends, _ := ReadyNodes(eps)
	for _, n := range nodes {
		if slices.Contains(backends, n) {
			return n, nil
		}
	}
	return nodes[0], nil
}

// waitHops waits, within the warm-up, for the first read of the router's
// next hops.
func waitHops(ctx context.Context, cfg Config, env Env, st *state) error {
	deadline := env.Clock.Now().Add(cfg.Warmup)
	for {
		st.mu.Lock()
		have := st.haveHops && len(st.hops) > 0
		st.mu.Unlock()
		if have || !env.Clock.Now().Before(deadline) {
			return nil
		}
		if err := sleep(ctx, env.Clock, routePoll); err != nil {
			return err
		}
	}
}

// routedRecovery computes phase 1 of a routed run from the requests (in
// time order) and the withdrawal: Recovered is the first answer after the
// last unanswered request placed at or before the withdrawal, or the kill
// when there was none. Without a withdrawal within the run, phase 1 is
// incomplete.
func routedRecovery(rs []placed, kill, withdrawn time.Time) (recovered time.Time, complete bool) {
	if withdrawn.IsZero() {
		return time.Time{}, false
	}
	lastFail := -1
	for i, r := range rs {
		if !r.at.Before(kill) && !r.at.After(withdrawn) && !r.o.Answered() {
			lastFail = i
		}
	}
	if lastFail < 0 {
		return kill, true
	}
	for _, r := range rs[lastFail+1:] {
		if r.o.Answered() {
			return r.at, true
		}
	}
	return time.Time{}, false
}

// routeLine says, for the picture, where the router sent the address's
// traffic and when the killed node left.
func routeLine(r RunResult) string {
	tl := r.Timeline
	line := "routed: next hops at the router " + strings.Join(r.HopsBefore, " ") + " before the kill"
	if tl.RouteWithdrawn.IsZero() {
		return line + "; " + r.Node + " did not leave the route within the run"
	}
	return line + "; " + r.Node + " left the route " + at(tl.RouteWithdrawn, tl.Kill)
}

// pickVictim names the node to kill: a next hop at the router in the
// routed case (after its first read), else the announcing node.
func pickVictim(ctx context.Context, cfg Config, env Env, st *state) (string, error) {
	if env.Routes == nil {
		return chooseVictim(ctx, cfg, env, st)
	}
	if err := waitHops(ctx, cfg, env, st); err != nil {
		return "", err
	}
	return chooseRouted(cfg, env, st)
}
