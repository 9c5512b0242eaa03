package bgpspeaker

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/packet/bfd"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"

	mbgp "github.com/mooringlb/mooring/internal/bgp"
)

// asMismatchRetry is how long a session whose learned AS broke dynamicASN
// stays shut before it is tried again (the router may have been fixed).
const asMismatchRetry = 30 * time.Second

// A session closed for maxReceivedPrefixes stays shut for
// prefixLimitRetry, doubling up to prefixLimitRetryMax each time its router
// sends too many again; it starts over when the peer's configuration
// changes or after the session stayed up for prefixLimitRetryMax.
const (
	prefixLimitRetry    = 30 * time.Second
	prefixLimitRetryMax = 10 * time.Minute
)

// prefixLimitBackoff is the wait before the hits-th reopening.
func prefixLimitBackoff(hits int) time.Duration {
	d := prefixLimitRetry
	for i := 1; i < hits && d < prefixLimitRetryMax; i++ {
		d *= 2
	}
	return min(d, prefixLimitRetryMax)
}

// countAdvertisedEvery bounds how often Sessions has GoBGP count the
// prefixes advertised on each session. GoBGP counts them by running every
// path through the peer's export (O(routes) per session, with garbage):
// at 10,000 Services, listing with the count on every status read was
// half of an agent's CPU in a burst (docs/benchmarks.md, "BGP at 10,000
// Services: where the agent's CPU and memory went"). Between counts a session keeps
// its last count; a session whose state changed is recounted at the next
// read. The status writes counters at most every CountsInterval (a
// minute) anyway.
const countAdvertisedEvery = 5 * time.Second

// Sessions lists every session's state, classifying why those that are not
// Established are not, and enforcing dynamicASN on those that are.
func (g *GoBGP) Sessions(ctx context.Context) ([]SessionState, error) {
	if g.srv == nil {
		return nil, nil
	}
	g.mu.Lock()
	count := g.countedAt.IsZero() || g.now().Sub(g.countedAt) >= countAdvertisedEvery
	if count {
		g.countedAt = g.now()
	}
	g.mu.Unlock()
	var listed []*api.Peer
	if err := g.srv.ListPeer(ctx, &api.ListPeerRequest{EnableAdvertised: count}, func(p *api.Peer) { listed = append(listed, p) }); err != nil {
		return nil, fmt.Errorf("listing BGP sessions: %w", err)
	}
	var out []SessionState
	for _, p := range listed {
		addr, err := netip.ParseAddr(p.GetConf().GetNeighborAddress())
		if err != nil {
			continue
		}
		g.mu.Lock()
		gp := g.byAddr[addr]
		g.mu.Unlock()
		if gp == nil {
			continue
		}
		out = append(out, g.sessionState(ctx, gp, p, count))
	}
	slices.SortFunc(out, func(a, b SessionState) int { return strings.Compare(a.Peer, b.Peer) })
	return out, nil
}

func (g *GoBGP) sessionState(ctx context.Context, gp *goPeer, p *api.Peer, counted bool) SessionState {
	st := p.GetState()
	s := SessionState{Peer: gp.cfg.Peer, Address: gp.cfg.Address, State: sessionState(st.GetSessionState()), PeerASN: st.GetPeerAsn(), BFD: BFDOff}
	var failures uint64
	if gp.cfg.BFD != nil {
		bst, f, _, ok := g.bfd.State(gp.cfg.Address)
		if !ok {
			g.startBFD(gp, gp.cfg)
		}
		s.BFD, failures = bfdState(bst), f
	}
	now := g.now()
	g.mu.Lock()
	g.sawState(gp, s.State == StateEstablished) // in case a state event was missed
	g.mu.Unlock()
	if s.State != gp.state {
		gp.state, gp.since = s.State, now
		if !counted {
			g.mu.Lock()
			g.countedAt = time.Time{} // recount at the next read
			g.mu.Unlock()
		}
	}
	s.Since = gp.since
	if g.shutForLimit(ctx, gp, &s) {
		return s
	}
	if s.State == StateEstablished {
		g.established(ctx, gp, p, &s, counted)
		if !gp.limit.at.IsZero() {
			g.shutForLimit(ctx, gp, &s)
		}
		gp.bfdFailures = failures
		return s
	}
	gp.sent = 0 // nothing is advertised on a session that is down
	if gp.asMismatch != "" && now.After(gp.retryAt) {
		gp.asMismatch = ""
		_ = g.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: gp.cfg.Address.String()})
	}
	connErr, connAt := g.hook.errs.lastError(gp.cfg.Address)
	g.mu.Lock()
	down := gp.down
	g.mu.Unlock()
	n, noted := g.hook.errs.lastNotification(gp.cfg.Address)
	if noted && n.at.After(down.at) {
		down = n.event()
	}
	o := observation{
		peer: gp.cfg.Peer, address: gp.cfg.Address, hasPassword: gp.cfg.Password != "",
		// A BFD failure since the session was up, or the router's Cease
		// for one (or GoBGP's own "BFD is down" reset).
		bfdFailed: failures > gp.bfdFailures || noted && n.bfd(), asMismatch: gp.asMismatch,
	}
	// The latest of the two says why the session is not up now.
	if down.kind != downNone && !down.at.Before(connAt) {
		o.down, o.downMessage = down.kind, down.msg
	} else {
		o.connErr = connErr
	}
	if g.probe != nil && isTimeout(o.connErr) {
		o.link = g.probe.Link(gp.cfg.Address)
		if o.hasPassword {
			o.probe = g.probeAuth(ctx, gp)
		}
	}
	s.Reason, s.Message = classify(o)
	if refusedOpen(o) {
		if ref, ok := g.probeOpenCached(ctx, gp); ok {
			s.Reason, s.Message = ref.describe(gp.cfg)
		}
	}
	return s
}

// shutForLimit reports a session shut for maxReceivedPrefixes until its
// back-off ends, then opens it; false when the session is not shut.
func (g *GoBGP) shutForLimit(ctx context.Context, gp *goPeer, s *SessionState) bool {
	if gp.limit.at.IsZero() {
		return false
	}
	if g.now().After(gp.limit.retryAt) {
		gp.limit.at = time.Time{}
		g.mu.Lock()
		gp.down = downEvent{} // our own Cease says nothing about the next attempt
		g.mu.Unlock()
		g.hook.errs.forget(gp.cfg.Address)
		_ = g.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: gp.cfg.Address.String()})
		return false
	}
	gp.sent = 0
	s.State, s.Established = StateIdle, time.Time{}
	s.HoldTime, s.KeepaliveTime, s.Families, s.GracefulRestart = 0, 0, nil, false
	s.PrefixesSent, s.PrefixesReceived = 0, 0
	s.Reason = ReasonMaxPrefixesExceeded
	s.Message = fmt.Sprintf("the router %s sent more than %d %s prefixes (maxReceivedPrefixes): the session was closed and opens again at %s; "+
		"the node uses no route a router sends, so configure the router to send the nodes nothing (docs/bgp.md, Configuring the router), or raise maxReceivedPrefixes (each received route costs the agent ~0.65 KiB)",
		gp.cfg.Address, gp.cfg.MaxReceived, gp.limit.family, gp.limit.retryAt.UTC().Format(time.RFC3339))
	return true
}

// enforceLimit closes an established session whose router sent more
// prefixes of one family than maxReceivedPrefixes (Cease, Administrative
// Shutdown, with the reason as its shutdown communication). It is checked
// at every listing (the status reads one every second), not per UPDATE:
// GoBGP's own prefix limit counts the whole Adj-RIB-In after every
// UPDATE, which took a session receiving 20,000 routes one per UPDATE
// from 1.9 s to 58 s. A router may so get about a second's worth of
// routes past the limit before the session closes.
func (g *GoBGP) enforceLimit(ctx context.Context, gp *goPeer, family mbgp.Family, received uint64) {
	now := g.now()
	gp.limit.hits++
	gp.limit.at, gp.limit.family = now, family
	gp.limit.retryAt = now.Add(prefixLimitBackoff(gp.limit.hits))
	g.log.Warn("BGP session closed: the router sent more prefixes than maxReceivedPrefixes", "peer", gp.cfg.Peer, "address", gp.cfg.Address,
		"family", family, "received", received, "limit", gp.cfg.MaxReceived, "opensAt", gp.limit.retryAt)
	_ = g.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: gp.cfg.Address.String(),
		Communication: fmt.Sprintf("maximum number of prefixes reached: more than %d %s", gp.cfg.MaxReceived, family)})
}

// refusedOpen: the router answered this node's OPEN with something else
// than an OPEN (GoBGP then reports an invalid message or sends an FSM
// error) — in practice a NOTIFICATION whose code GoBGP keeps to itself.
func refusedOpen(o observation) bool {
	return (o.down == downInvalidMessage && strings.HasSuffix(o.downMessage, "invalid-msg")) ||
		(o.down == downNotificationSent && strings.Contains(o.downMessage, "code 5("))
}

// probeOpenCached asks the router why it refuses the OPEN, at most once
// per probeEvery per peer.
func (g *GoBGP) probeOpenCached(ctx context.Context, gp *goPeer) (openRefusal, bool) {
	if g.opens == nil {
		g.opens = map[netip.Addr]openCache{}
	}
	c, ok := g.opens[gp.cfg.Address]
	if ok && g.now().Sub(c.at) < probeEvery {
		return c.r, c.ok
	}
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	r, found := probeOpen(pctx, gp.cfg, g.routerID)
	g.opens[gp.cfg.Address] = openCache{at: g.now(), r: r, ok: found}
	return r, found
}

type openCache struct {
	at time.Time
	r  openRefusal
	ok bool
}

func isTimeout(e string) bool {
	e = strings.ToLower(e)
	return strings.Contains(e, "timeout") || strings.Contains(e, "timed out")
}

// probeAuth runs the prober at most once per probeEvery per peer.
func (g *GoBGP) probeAuth(ctx context.Context, gp *goPeer) ProbeResult {
	if g.probes == nil {
		g.probes = map[netip.Addr]probeCache{}
	}
	c := g.probes[gp.cfg.Address]
	if !c.at.IsZero() && g.now().Sub(c.at) < probeEvery {
		return c.r
	}
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	r := g.probe.Probe(pctx, gp.cfg.Address, gp.cfg.SourceAddress, gp.cfg.Port)
	g.probes[gp.cfg.Address] = probeCache{at: g.now(), r: r}
	return r
}

type probeCache struct {
	at time.Time
	r  ProbeResult
}

// established fills the negotiated values and enforces dynamicASN.
func (g *GoBGP) established(ctx context.Context, gp *goPeer, p *api.Peer, s *SessionState, counted bool) {
	if up := p.GetTimers().GetState().GetUptime(); up != nil {
		s.Established = up.AsTime()
	}
	ts := p.GetTimers().GetState()
	s.HoldTime = time.Duration(ts.GetNegotiatedHoldTime()) * time.Second
	s.KeepaliveTime = time.Duration(ts.GetKeepaliveInterval()) * time.Second
	for _, af := range p.GetAfiSafis() {
		st := af.GetState()
		if !st.GetEnabled() {
			continue
		}
		var f mbgp.Family
		switch st.GetFamily().GetAfi() {
		case api.Family_AFI_IP:
			f = mbgp.IPv4
		case api.Family_AFI_IP6:
			f = mbgp.IPv6
		}
		if f != 0 {
			s.Families = append(s.Families, f)
		}
		s.PrefixesSent += int64(st.GetAdvertised())
		s.PrefixesReceived += int64(st.GetReceived())
		if lim := gp.cfg.MaxReceived; f != 0 && lim > 0 && st.GetReceived() > uint64(lim) && gp.limit.at.IsZero() {
			g.enforceLimit(ctx, gp, f, st.GetReceived())
		}
	}
	if gp.limit.hits > 0 && !s.Established.IsZero() && g.now().Sub(s.Established) >= prefixLimitRetryMax {
		gp.limit.hits = 0 // stayed up long enough: the back-off starts over
	}
	if counted {
		gp.sent = s.PrefixesSent
	} else {
		s.PrefixesSent = gp.sent
	}
	for _, c := range p.GetState().GetRemoteCap() {
		if c.GetGracefulRestart() != nil && gp.cfg.GracefulRestart {
			s.GracefulRestart = true
		}
	}
	if msg := dynamicMismatch(gp.cfg, s.PeerASN); msg != "" {
		gp.asMismatch, gp.retryAt = msg, g.now().Add(asMismatchRetry)
		_ = g.srv.DisablePeer(ctx, &api.DisablePeerRequest{Address: gp.cfg.Address.String(), Communication: "peer AS not allowed by dynamicASN"})
		s.State, s.Reason, s.Message = StateIdle, ReasonPeerASMismatch, msg
	}
}

// dynamicMismatch says why a learned AS breaks dynamicASN, "" if it does
// not.
func dynamicMismatch(p PeerConfig, learned uint32) string {
	switch {
	case p.PeerASN != 0 || learned == 0:
		return ""
	case p.Dynamic == mbgp.DynamicInternal && learned != p.LocalASN:
		return fmt.Sprintf("the router %s is in AS %d but dynamicASN is internal (AS %d): the session is shut; fix the router or set dynamicASN: external", p.Address, learned, p.LocalASN)
	case p.Dynamic == mbgp.DynamicExternal && learned == p.LocalASN:
		return fmt.Sprintf("the router %s is in this node's AS %d but dynamicASN is external: the session is shut; fix the router or set dynamicASN: internal", p.Address, learned)
	}
	return ""
}

func sessionState(s api.PeerState_SessionState) State {
	switch s {
	case api.PeerState_SESSION_STATE_CONNECT:
		return StateConnect
	case api.PeerState_SESSION_STATE_ACTIVE:
		return StateActive
	case api.PeerState_SESSION_STATE_OPENSENT:
		return StateOpenSent
	case api.PeerState_SESSION_STATE_OPENCONFIRM:
		return StateOpenConfirm
	case api.PeerState_SESSION_STATE_ESTABLISHED:
		return StateEstablished
	}
	return StateIdle
}

func bfdState(s bfd.StateType) State {
	switch s {
	case bfd.StateUp:
		return BFDUp
	case bfd.StateInit:
		return BFDInit
	case bfd.StateAdminDown:
		return BFDAdminDown
	}
	return BFDDown
}

func downKindOf(r api.PeerState_DisconnectReason) downKind {
	switch r {
	case api.PeerState_DISCONNECT_REASON_UNSPECIFIED:
		return downNone
	case api.PeerState_DISCONNECT_REASON_HOLD_TIMER_EXPIRED:
		return downHoldTimer
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_SENT:
		return downNotificationSent
	case api.PeerState_DISCONNECT_REASON_NOTIFICATION_RECEIVED:
		return downNotificationReceived
	case api.PeerState_DISCONNECT_REASON_READ_FAILED, api.PeerState_DISCONNECT_REASON_WRITE_FAILED:
		return downClosed
	case api.PeerState_DISCONNECT_REASON_INVALID_MSG:
		return downInvalidMessage
	case api.PeerState_DISCONNECT_REASON_BAD_PEER_AS:
		return downBadPeerAS
	}
	return downOther
}

// gobgpBFDReset is the shutdown communication of the Cease GoBGP sends
// when its BFD session goes down (pkg/server/bfd_peer.go, resetPeer).
const gobgpBFDReset = "BFD is down"

// ceaseBFDDown is the Cease subcode "BFD Down" (RFC 9384), which FRR
// sends when its BFD session takes the BGP session down.
const ceaseBFDDown = 10

// bfd reports whether n reset the session for BFD: GoBGP's own Cease
// (administrative reset, "BFD is down") or the router's Cease/BFD Down.
func (n notification) bfd() bool {
	if n.code != bgp.BGP_ERROR_CEASE {
		return false
	}
	return n.subcode == ceaseBFDDown ||
		n.sent && n.subcode == bgp.BGP_ERROR_SUB_ADMINISTRATIVE_RESET && n.communication == gobgpBFDReset
}

// event turns a logged NOTIFICATION into a down event.
func (n notification) event() downEvent {
	kind, verb := downNotificationReceived, "notification-received"
	if n.sent {
		kind, verb = downNotificationSent, "notification-sent"
	}
	if n.code == bgp.BGP_ERROR_OPEN_MESSAGE_ERROR && n.subcode == bgp.BGP_ERROR_SUB_BAD_PEER_AS && n.sent {
		kind = downBadPeerAS
	}
	return downEvent{kind: kind, at: n.at, msg: verb + " " + bgp.NewNotificationErrorCode(uint8(n.code), uint8(n.subcode)).String()}
}
