package bgpspeaker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/mooringlb/mooring/internal/bgp"
)

// Password is a peer's resolved TCP-MD5 password. Unavailable says why
// the Secret or its key cannot be read ("" when it can).
type Password struct {
	Value       string
	Unavailable string
}

// Desired is one node's decision and what the adapter resolved for it.
type Desired struct {
	Node bgp.NodeResult
	// Passwords maps a Secret name to its password.
	Passwords map[string]Password
}

// Speaker makes a node's decision true on a Router: it adds, changes and
// removes sessions one by one (never resetting a session for another's
// change) and sends each session exactly the difference between the routes
// it has and the routes it should have.
type Speaker struct {
	r          Router
	log        *slog.Logger
	listenPort int

	mu      sync.Mutex
	started bool
	global  Global
	// restarting: peers added by the first Apply after a (re)start carry
	// the graceful-restart Restart State bit.
	restarting bool
	peers      map[string]*applied
	// closed are desired sessions that are not opened, with why.
	closed map[string]SessionState
	// warnings per session from the decision.
	warnings map[string][]string
}

// applied is what the router holds for one session.
type applied struct {
	cfg PeerConfig
	// routes are sorted by prefix (a slice: at 20,000 routes a map cost
	// twice the memory): the decision's own (bgp.Session.Routes, never
	// changed once decided, and the backend keeps the same as its last
	// result), so the speaker holds no array of its own (a copy with next
	// hops is 640 KB per session at 10,000 routes). hops are the next hops
	// they went out with.
	routes []bgp.Route
	hops   hops
}

// New returns a Speaker driving r. listenPort <= 0 does not listen.
func New(r Router, log *slog.Logger, listenPort int) *Speaker {
	return &Speaker{r: r, log: log, listenPort: listenPort, restarting: true,
		peers: map[string]*applied{}, closed: map[string]SessionState{}, warnings: map[string][]string{}}
}

// Apply converges the router to d. Errors of one session do not stop the
// others; they are joined.
func (s *Speaker) Apply(ctx context.Context, d Desired) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	open, closed := s.split(d)
	if err := s.ensureStarted(ctx, d.Node, len(open) > 0); err != nil {
		return err
	}
	var errs []error
	for name, a := range s.peers {
		if _, ok := open[name]; !ok {
			errs = append(errs, s.deletePeer(ctx, name, a))
		}
	}
	first := s.restarting
	s.restarting = false
	for _, name := range sortedKeys(open) {
		errs = append(errs, s.applySession(ctx, open[name], first))
	}
	s.closed = closed
	return errors.Join(errs...)
}

// split sorts the decision's sessions into those to open (with their
// password) and those that stay closed, with a reason.
func (s *Speaker) split(d Desired) (map[string]PeerConfig, map[string]SessionState) {
	open, closed := map[string]PeerConfig{}, map[string]SessionState{}
	clear(s.warnings)
	now := time.Now()
	for _, ses := range d.Node.Sessions {
		s.warnings[ses.Peer] = ses.Warnings
		st := SessionState{Peer: ses.Peer, Address: ses.Address, State: StateIdle, Since: now, BFD: BFDOff, PeerASN: ses.PeerASN}
		if ses.Blocked != "" {
			st.Reason, st.Message = ReasonInvalidConfig, ses.Blocked
			closed[ses.Peer] = s.keepSince(st)
			continue
		}
		pc := PeerConfig{Session: ses}
		if ses.PasswordSecret != "" {
			pw, ok := d.Passwords[ses.PasswordSecret]
			switch {
			case !ok:
				st.Reason, st.Message = ReasonPasswordUnavailable, fmt.Sprintf("Secret %q is not known yet: the session stays closed (never unauthenticated) until it is read", ses.PasswordSecret)
			case pw.Unavailable != "":
				st.Reason, st.Message = ReasonPasswordUnavailable, fmt.Sprintf("%s; the session stays closed (never unauthenticated)", pw.Unavailable)
			case pw.Value == "":
				st.Reason, st.Message = ReasonPasswordUnavailable, fmt.Sprintf("Secret %q has an empty %q: the session stays closed (never unauthenticated); put the password there", ses.PasswordSecret, "password")
			}
			if st.Reason != "" {
				closed[ses.Peer] = s.keepSince(st)
				continue
			}
			pc.Password = pw.Value
		}
		open[ses.Peer] = pc
	}
	return open, closed
}

// keepSince keeps the transition time of a session that stays closed for
// the same reason.
func (s *Speaker) keepSince(st SessionState) SessionState {
	if old, ok := s.closed[st.Peer]; ok && old.Reason == st.Reason && old.Message == st.Message {
		st.Since = old.Since
	}
	return st
}

// ensureStarted starts the router when the first session appears, restarts
// it when the identity changes, and stops it when no session is left.
func (s *Speaker) ensureStarted(ctx context.Context, n bgp.NodeResult, want bool) error {
	g := Global{ASN: n.ASN, RouterID: n.RouterID, ListenPort: s.listenPort}
	switch {
	case !want && s.started:
		for name, a := range s.peers {
			_ = s.deletePeer(ctx, name, a)
		}
		s.started = false
		return s.r.Stop(ctx, false)
	case !want:
		return nil
	case s.started && g == s.global:
		return nil
	case s.started:
		s.log.Warn("the node's BGP identity changed: restarting every session gracefully", "from", s.global.RouterID, "asn", s.global.ASN, "to", g.RouterID, "newASN", g.ASN)
		if err := s.r.Stop(ctx, true); err != nil {
			s.log.Warn("stopping BGP", "error", err)
		}
		s.started, s.restarting = false, true
		clear(s.peers)
	}
	if err := s.r.Start(ctx, g); err != nil {
		return err
	}
	s.started, s.global = true, g
	return nil
}

func (s *Speaker) deletePeer(ctx context.Context, name string, a *applied) error {
	delete(s.peers, name)
	if err := s.r.DeletePeer(ctx, name); err != nil {
		return fmt.Errorf("removing BGP peer %s (%s): %w", name, a.cfg.Address, err)
	}
	return nil
}

// applySession adds or updates one session and sends it its route diff.
func (s *Speaker) applySession(ctx context.Context, pc PeerConfig, first bool) error {
	a, ok := s.peers[pc.Peer]
	switch {
	case ok && a.cfg.Address != pc.Address:
		if err := s.deletePeer(ctx, pc.Peer, a); err != nil {
			return err
		}
		ok = false
	case ok && !sameConfig(a.cfg, pc):
		if err := s.r.UpdatePeer(ctx, configOnly(pc)); err != nil {
			return fmt.Errorf("updating BGP peer %s: %w", pc.Peer, err)
		}
		a.cfg = configOnly(pc)
	}
	if !ok {
		if err := s.r.AddPeer(ctx, configOnly(pc), first && pc.GracefulRestart); err != nil {
			return fmt.Errorf("adding BGP peer %s: %w", pc.Peer, err)
		}
		a = &applied{cfg: configOnly(pc)}
		s.peers[pc.Peer] = a
	}
	return s.sendDiff(ctx, a, pc)
}

// configOnly drops what is not the session's configuration.
func configOnly(pc PeerConfig) PeerConfig {
	pc.Routes, pc.Warnings = nil, nil
	return pc
}

func sameConfig(a, b PeerConfig) bool { return reflect.DeepEqual(configOnly(a), configOnly(b)) }

// sendDiff announces new and changed routes and withdraws those gone.
// Cost: O(R) for R routes (both lists are sorted by prefix).
func (s *Speaker) sendDiff(ctx context.Context, a *applied, pc PeerConfig) error {
	want, hw := pc.Routes, hopsOf(pc.Session)
	if !slices.IsSortedFunc(want, compareRoutes) {
		want = slices.Clone(want) // the decision's slice is not ours to sort
		slices.SortFunc(want, compareRoutes)
	}
	add, del := diffRoutes(a.routes, a.hops, want, hw)
	if err := s.r.Withdraw(ctx, pc.Peer, del); err != nil {
		return err
	}
	if err := s.r.Announce(ctx, pc.Peer, add); err != nil {
		// The withdrawals went through; the additions are tried again
		// with the next change (they still differ from what is held).
		a.routes = without(a.routes, del)
		return err
	}
	a.routes, a.hops = want, hw
	return nil
}

// diffRoutes returns, as paths, the routes of want not in have or changed
// (attributes, or the next hop: hh and hw give have's and want's), and
// the routes of have whose prefix is not in want. Both sorted by prefix.
func diffRoutes(have []bgp.Route, hh hops, want []bgp.Route, hw hops) (add, del []Path) {
	i, j := 0, 0
	for i < len(have) || j < len(want) {
		switch {
		case j == len(want) || (i < len(have) && compareRoutes(have[i], want[j]) < 0):
			del = append(del, Path{Route: have[i], NextHop: hh.of(have[i].Prefix)})
			i++
		case i == len(have) || compareRoutes(have[i], want[j]) > 0:
			add = append(add, Path{Route: want[j], NextHop: hw.of(want[j].Prefix)})
			j++
		default:
			p := want[j].Prefix
			if nh := hw.of(p); hh.of(p) != nh || have[i].Attrs.Key() != want[j].Attrs.Key() {
				add = append(add, Path{Route: want[j], NextHop: nh})
			}
			i, j = i+1, j+1
		}
	}
	return add, del
}

// without returns have without the prefixes of drop (both sorted), in an
// array of its own.
func without(have []bgp.Route, drop []Path) []bgp.Route {
	out := make([]bgp.Route, 0, len(have))
	j := 0
	for _, h := range have {
		for j < len(drop) && compareRoutes(drop[j].Route, h) < 0 {
			j++
		}
		if j < len(drop) && compareRoutes(drop[j].Route, h) == 0 {
			continue
		}
		out = append(out, h)
	}
	return out
}

func compareRoutes(a, b bgp.Route) int {
	return cmp.Or(a.Prefix.Addr().Compare(b.Prefix.Addr()), cmp.Compare(a.Prefix.Bits(), b.Prefix.Bits()))
}

// hops are what a route's next hop depends on: the session's own family
// and the next hops it names for the others.
type hops struct {
	own    bgp.Family
	v4, v6 netip.Addr
}

func hopsOf(ses bgp.Session) hops {
	return hops{own: bgp.FamilyOf(ses.Address), v4: ses.NextHop4, v6: ses.NextHop6}
}

// of is zero (the session's own address) for the session's family and the
// node's own address for the other family.
func (h hops) of(p netip.Prefix) netip.Addr {
	f := bgp.FamilyOf(p.Addr())
	switch {
	case f == h.own:
		return netip.Addr{}
	case f == bgp.IPv4:
		return h.v4
	}
	return h.v6
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// Status lists every desired session: the router's view of the open ones,
// and the reason of those kept closed. Decision warnings are appended to
// the message.
func (s *Speaker) Status(ctx context.Context) ([]SessionState, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []SessionState
	if s.started {
		got, err := s.r.Sessions(ctx)
		if err != nil {
			return nil, err
		}
		out = got
	}
	for _, st := range s.closed {
		out = append(out, st)
	}
	for i := range out {
		if w := s.warnings[out[i].Peer]; len(w) > 0 {
			out[i].Message = strings.TrimSpace(out[i].Message + " " + strings.Join(w, "; "))
		}
	}
	slices.SortFunc(out, func(a, b SessionState) int { return cmp.Compare(a.Peer, b.Peer) })
	return out, nil
}

// Shutdown stops the router. Graceful (SIGTERM) leaves without a Cease so
// routers keep this node's routes while it restarts.
func (s *Speaker) Shutdown(ctx context.Context, graceful bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started {
		return nil
	}
	s.started = false
	return s.r.Stop(ctx, graceful)
}
