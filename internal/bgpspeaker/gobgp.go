package bgpspeaker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/osrg/gobgp/v4/api"
	"github.com/osrg/gobgp/v4/pkg/apiutil"
	"github.com/osrg/gobgp/v4/pkg/packet/bgp"
	"github.com/osrg/gobgp/v4/pkg/server"

	mbfd "github.com/mooringlb/mooring/internal/bfd"
	mbgp "github.com/mooringlb/mooring/internal/bgp"
)

// GoBGP is the Router backed by an embedded GoBGP v4 server.
//
// Each peer has a route table of its own, so per-peer differences need no
// export policies and a change to one peer's routes never touches another
// session. The first peer added uses GoBGP's global table, where a route
// is one path; every other peer gets a VRF (route distinguisher and route
// target 65535:id, never sent: only unicast families are negotiated),
// where a route is a VRF path plus its VPN copy in the global table
// (~0.26 KiB more per route: docs/benchmarks.md, "One peer from the
// global table"). GoBGP sends global unicast routes only to non-VRF neighbours,
// and converts VRF routes back to plain unicast for their VRF neighbour.
// Which peer uses the global table never changes while it exists (that
// would need a new session); when it is deleted, the next peer added
// takes it.
type GoBGP struct {
	log   *slog.Logger
	hook  *connHook
	now   func() time.Time
	probe Prober

	srv *server.BgpServer
	// bfd runs the sessions' BFD (Mooring's, not GoBGP's: docs/bgp.md,
	// "BFD against FRR").
	bfd     *mbfd.Server
	served  chan struct{}
	cancel  context.CancelFunc
	changed chan struct{}

	mu    sync.Mutex
	peers map[string]*goPeer
	// globalPeer names the peer whose routes are in the global table, ""
	// for none.
	globalPeer string
	byAddr     map[netip.Addr]*goPeer
	nextID     uint32
	attrs      attrCache
	probes     map[netip.Addr]probeCache
	opens      map[netip.Addr]openCache
	// routerID is the running instance's, for the OPEN probe.
	routerID netip.Addr
	// countedAt is when Sessions last had GoBGP count the advertised
	// prefixes (zero: count at the next call).
	countedAt time.Time
}

// goPeer is one configured session.
type goPeer struct {
	cfg PeerConfig
	// vrf is the peer's VRF, "" for the peer of the global table.
	vrf string
	id  uint32
	// since is when the backend last saw the state change; state the
	// state then; bfdFailures the BFD failure count then.
	since       time.Time
	state       State
	bfdFailures uint64
	// asMismatch is set when a learned AS broke dynamicASN; the peer is
	// shut down until retryAt.
	asMismatch string
	retryAt    time.Time
	// down is why the session last failed, from GoBGP's state events
	// (its peer listing does not carry the reason).
	down downEvent
	// sent is the prefixes GoBGP last counted as advertised on the
	// session (Sessions recounts them at most every countAdvertisedEvery).
	sent int64
	// limit is set while the session is shut for maxReceivedPrefixes.
	limit prefixLimit
	// bfdErr is why the BFD session last failed to start ("" if it did).
	bfdErr string
	// establishedAt is when the BGP session last became Established, zero
	// while it is not; downSince when it last stopped being (or the peer
	// was added), zero while it is. bfdOn: the peer's BFD session is
	// enabled (bfdGate).
	establishedAt, downSince time.Time
	bfdOn                    bool
}

// When a peer's BFD session runs (bfdGate): from bfdAfterEstablished after
// its BGP session is Established, and from bfdWithoutBGP after the BGP
// session last went down (or the peer was added) if it has not come up
// since; otherwise it is disabled (Down, silent). FRR 8.4 moves a
// configured neighbour's BFD session to the BGP connection's addresses at
// the first establishment (a new session; the old one closed with a Down),
// and its bgpd resets the BGP session if the old one was Up (FRR issue
// 17337, fixed after 8.4): a node whose BFD came Up before BGP did — BGP's
// first connections collided, or the router restarted — was reset once
// right after establishment. bgpd moves the session at the establishment;
// a second leaves ample room under load and costs BFD protection only in
// a session's first second or two, which the hold time covers. A router
// that waits for BFD before it lets BGP up ("BFD strict mode") gets BFD
// bfdWithoutBGP after BGP stopped, and then its session. docs/bgp.md,
// "BFD against FRR".
const (
	bfdAfterEstablished = time.Second
	bfdWithoutBGP       = 10 * time.Second
)

// bfdGate says whether a peer's BFD session runs at now, given when its
// BGP session became Established (zero: it is not), when it last went down
// (zero: it is up) and whether BFD runs already (it stays on when BGP comes
// up after bfdWithoutBGP turned it on); again is when to ask again (zero:
// nothing changes with time alone).
func bfdGate(established, down time.Time, on bool, now time.Time) (run bool, again time.Duration) {
	if !established.IsZero() {
		if left := established.Add(bfdAfterEstablished).Sub(now); !on && left > 0 {
			return false, left
		}
		return true, 0
	}
	if left := down.Add(bfdWithoutBGP).Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}

// prefixLimit is a session's state under maxReceivedPrefixes.
type prefixLimit struct {
	// at is when the limit was found exceeded (zero: it is not), by
	// family; the session opens again at retryAt.
	at, retryAt time.Time
	family      mbgp.Family
	// hits counts exceedings since the back-off last started over.
	hits int
}

type downEvent struct {
	kind downKind
	msg  string
	at   time.Time
}

// NewGoBGP returns a stopped backend logging through log. probe may be
// nil (no authentication-failure probing).
func NewGoBGP(log *slog.Logger, probe Prober) *GoBGP {
	return &GoBGP{
		log: log, hook: newConnHook(log.Handler(), time.Now), now: time.Now, probe: probe,
		changed: make(chan struct{}, 1),
		peers:   map[string]*goPeer{}, byAddr: map[netip.Addr]*goPeer{}, attrs: attrCache{},
	}
}

// globalFamilies are the indices of GoBGP's AfiSafiType enumeration
// (oc.IntToAfiSafiTypeMap) the API's Global.Families takes: IPv4 and IPv6
// unicast, L3VPN IPv4 and IPv6 unicast, and route-target constraint
// (12), whose table GoBGP's DeleteVrf uses unconditionally (without it,
// removing a peer crashed: TestChurnAndPeerChangesResetNothing).
var globalFamilies = []uint32{0, 1, 4, 5, 12}

// Changed receives a value whenever a session changes state.
func (g *GoBGP) Changed() <-chan struct{} { return g.changed }

func (g *GoBGP) notify() {
	select {
	case g.changed <- struct{}{}:
	default:
	}
}

// Start creates and starts a GoBGP server with g's identity.
func (g *GoBGP) Start(ctx context.Context, gl Global) error {
	if g.srv != nil {
		return errors.New("bgpspeaker: started twice without Stop")
	}
	lvl := &slog.LevelVar{}
	lvl.Set(slog.LevelDebug) // the hook needs GoBGP's connection errors
	srv := server.NewBgpServer(server.LoggerOption(slog.New(g.hook), lvl))
	served := make(chan struct{})
	go func() { defer close(served); srv.Serve() }()
	listen := int32(gl.ListenPort)
	if listen <= 0 {
		listen = -1
	}
	err := srv.StartBgp(ctx, &api.StartBgpRequest{Global: &api.Global{
		Asn: gl.ASN, RouterId: gl.RouterID.String(), ListenPort: listen,
		// Only the families used (the per-peer tables are VPN routes
		// inside): GoBGP allocates two tables of 2,048 shards per family,
		// about 9 MiB for its ~30 families by default.
		Families: globalFamilies,
	}})
	if err != nil {
		srv.Stop()
		<-served
		return fmt.Errorf("starting BGP (AS %d, router ID %s): %w", gl.ASN, gl.RouterID, err)
	}
	if err := importOnlyOwn(ctx, srv); err != nil {
		srv.Stop()
		<-served
		return err
	}
	wctx, cancel := context.WithCancel(context.Background())
	if err := srv.WatchEvent(wctx, server.WatchEventMessageCallbacks{
		OnPeerUpdate: func(ev *apiutil.WatchEventMessage_PeerEvent, at time.Time) { g.peerEvent(ev, at) },
	}, server.WatchPeer()); err != nil {
		cancel()
		srv.Stop()
		<-served
		return fmt.Errorf("watching BGP sessions: %w", err)
	}
	g.srv, g.served, g.cancel, g.routerID = srv, served, cancel, gl.RouterID
	g.mu.Lock()
	g.bfd = mbfd.NewServer(g.log)
	g.peers, g.byAddr, g.globalPeer = map[string]*goPeer{}, map[netip.Addr]*goPeer{}, ""
	g.attrs = attrCache{}
	g.mu.Unlock()
	return nil
}

// ownRoutesOnly names the global import policy importOnlyOwn installs.
const ownRoutesOnly = "mooring-own-routes-only"

// importOnlyOwn makes GoBGP's table take only the routes this node
// originates: the agent uses nothing a router sends, and a route taken in
// from a VRF peer costs ~2 KiB (its VPN copy, best-path state and the
// VRF's import; 37–43 MiB for 20,000 in TestMemReceivedRoutes), so a
// router sending its table would otherwise put the agent past its memory
// limit. GoBGP still keeps what each session received in its Adj-RIB-In
// (the status's received count) and answers route refreshes from it.
func importOnlyOwn(ctx context.Context, srv *server.BgpServer) error {
	own := &api.Policy{Name: ownRoutesOnly, Statements: []*api.Statement{{
		Name:       ownRoutesOnly + "-local",
		Conditions: &api.Conditions{RouteType: api.Conditions_ROUTE_TYPE_LOCAL},
		Actions:    &api.Actions{RouteAction: api.RouteAction_ROUTE_ACTION_ACCEPT},
	}}}
	if err := srv.AddPolicy(ctx, &api.AddPolicyRequest{Policy: own}); err != nil {
		return fmt.Errorf("adding BGP import policy: %w", err)
	}
	err := srv.SetPolicyAssignment(ctx, &api.SetPolicyAssignmentRequest{Assignment: &api.PolicyAssignment{
		Name: "global", Direction: api.PolicyDirection_POLICY_DIRECTION_IMPORT,
		Policies: []*api.Policy{{Name: ownRoutesOnly}}, DefaultAction: api.RouteAction_ROUTE_ACTION_REJECT,
	}})
	if err != nil {
		return fmt.Errorf("assigning BGP import policy: %w", err)
	}
	return nil
}

// peerEvent keeps why a session failed, turns the session's BFD on and off
// as its state changes (bfdGate) and wakes the status writer.
func (g *GoBGP) peerEvent(ev *apiutil.WatchEventMessage_PeerEvent, at time.Time) {
	if ev.Type == apiutil.PEER_EVENT_STATE {
		st := ev.Peer.State
		g.mu.Lock()
		gp := g.byAddr[st.NeighborAddress]
		if gp != nil {
			switch k := downKindOf(st.DisconnectReason); {
			case st.SessionState == bgp.BGP_FSM_ESTABLISHED:
				gp.down = downEvent{}
			case k != downNone && k != downOther:
				gp.down = downEvent{kind: k, msg: st.DisconnectMessage, at: at}
			}
			g.sawState(gp, st.SessionState == bgp.BGP_FSM_ESTABLISHED)
		}
		g.mu.Unlock()
		if st.SessionState == bgp.BGP_FSM_ESTABLISHED {
			g.hook.errs.forget(st.NeighborAddress)
		}
	}
	g.notify()
}

// Stop closes every session and the server. Graceful sends no Cease, so
// routers in graceful-restart helper mode keep the routes as stale.
func (g *GoBGP) Stop(ctx context.Context, graceful bool) error {
	if g.srv == nil {
		return nil
	}
	// BFD first, silently (no AdminDown): as when the node dies, the
	// router's detection time runs, and its graceful-restart helper has
	// already seen the TCP session close.
	g.bfd.Close()
	err := g.srv.StopBgp(ctx, &api.StopBgpRequest{AllowGracefulRestart: graceful})
	g.cancel()
	g.srv.Stop()
	<-g.served
	g.srv = nil
	return err
}

// AddPeer creates the session and its route table: the global table if
// no other peer uses it, else a VRF of its own.
func (g *GoBGP) AddPeer(ctx context.Context, p PeerConfig, restarting bool) error {
	g.mu.Lock()
	if _, ok := g.peers[p.Peer]; ok {
		g.mu.Unlock()
		return fmt.Errorf("peer %s exists", p.Peer)
	}
	g.nextID++
	gp := &goPeer{cfg: p, id: g.nextID, since: g.now(), state: StateIdle, downSince: g.now()}
	if g.globalPeer != "" {
		gp.vrf = fmt.Sprintf("peer-%d", g.nextID)
	}
	g.mu.Unlock()
	if gp.vrf != "" {
		if err := g.srv.AddVrf(ctx, &api.AddVrfRequest{Vrf: vrfFor(gp.vrf, gp.id)}); err != nil {
			return fmt.Errorf("peer %s: creating its route table: %w", p.Peer, err)
		}
	}
	if err := g.srv.AddPeer(ctx, &api.AddPeerRequest{Peer: apiPeer(p, gp.vrf, restarting)}); err != nil {
		if gp.vrf != "" {
			_ = g.srv.DeleteVrf(ctx, &api.DeleteVrfRequest{Name: gp.vrf})
		}
		return fmt.Errorf("peer %s (%s): %w", p.Peer, p.Address, err)
	}
	g.mu.Lock()
	g.peers[p.Peer], g.byAddr[p.Address] = gp, gp
	if gp.vrf == "" {
		g.globalPeer = p.Peer
	}
	g.mu.Unlock()
	if p.BFD != nil {
		g.startBFD(gp, p)
	}
	return nil
}

// startBFD starts the peer's BFD session. It cannot fail the BGP
// session: when it cannot start (UDP 3784 taken by another daemon on the
// node), BFD shows Down and Sessions tries again every listing, logging
// each new error once.
func (g *GoBGP) startBFD(gp *goPeer, p PeerConfig) {
	err := g.addBFD(gp, p)
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	g.mu.Lock()
	changed := msg != gp.bfdErr
	gp.bfdErr = msg
	g.mu.Unlock()
	if err != nil && changed {
		g.log.Warn("BFD: the session cannot start; BGP runs without it until it can (tried again every second)", "peer", p.Peer, "address", p.Address, "err", err)
	}
}

// sawState records whether gp's BGP session is Established (a state event
// or the listing) and gates its BFD on the change. g.mu is held.
func (g *GoBGP) sawState(gp *goPeer, up bool) {
	switch {
	case up && gp.establishedAt.IsZero():
		gp.establishedAt, gp.downSince = g.now(), time.Time{}
	case !up && gp.downSince.IsZero():
		gp.establishedAt, gp.downSince = time.Time{}, g.now()
	default:
		return
	}
	g.gateBFD(gp)
}

// gateBFD turns gp's BFD session on or off as bfdGate says, and looks
// again when it says to. g.mu is held (the calls to the BFD server are
// ordered with the state they act on; the server never calls back into g
// while it is called). A peer without a BFD session: SetEnabled does
// nothing.
func (g *GoBGP) gateBFD(gp *goPeer) {
	on, again := bfdGate(gp.establishedAt, gp.downSince, gp.bfdOn, g.now())
	if on != gp.bfdOn {
		gp.bfdOn = on
		g.bfd.SetEnabled(gp.cfg.Address, on)
	}
	if again > 0 {
		time.AfterFunc(again, func() {
			g.mu.Lock()
			defer g.mu.Unlock()
			if g.byAddr[gp.cfg.Address] == gp {
				g.gateBFD(gp)
			}
		})
	}
}

// addBFD starts the peer's BFD session; a path failure resets an
// established BGP session (Cease, Administrative Reset, "BFD is down", as
// GoBGP's own BFD did) so the node's status says BFDDown until both are
// back.
func (g *GoBGP) addBFD(gp *goPeer, p PeerConfig) error {
	srv, addr := g.srv, p.Address
	// Added disabled; bfdGate turns it on when the BGP session allows.
	g.mu.Lock()
	defer g.mu.Unlock()
	gp.bfdOn = false
	defer g.gateBFD(gp)
	return g.bfd.Add(addr, p.SourceAddress, bfdConfig(p.BFD), false, mbfd.Events{
		Failure: func() {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			// Only an Established session: GoBGP queues the Cease of a
			// reset while the session is down and sends it when the next
			// one is up, resetting that one (with BIRD, a loop).
			established := false
			_ = srv.ListPeer(ctx, &api.ListPeerRequest{Address: addr.String()}, func(p *api.Peer) {
				established = established || p.GetState().GetSessionState() == api.PeerState_SESSION_STATE_ESTABLISHED
			})
			if !established {
				return
			}
			if err := srv.ResetPeer(ctx, &api.ResetPeerRequest{Address: addr.String(), Communication: gobgpBFDReset}); err != nil {
				g.log.Warn("BFD: resetting the BGP session failed", "address", addr, "err", err)
			}
		},
		Changed: g.notify,
	})
}

func bfdConfig(b *mbgp.BFD) mbfd.Config {
	return mbfd.Config{DesiredMinTx: b.TransmitInterval, RequiredMinRx: b.ReceiveInterval, DetectMult: b.DetectMultiplier}
}

// UpdatePeer changes the session in place; GoBGP resets it only for
// changes that need a new OPEN.
func (g *GoBGP) UpdatePeer(ctx context.Context, p PeerConfig) error {
	g.mu.Lock()
	gp, ok := g.peers[p.Peer]
	g.mu.Unlock()
	if !ok {
		return fmt.Errorf("peer %s does not exist", p.Peer)
	}
	if gp.cfg.Address != p.Address {
		return fmt.Errorf("peer %s: the address changed (%s to %s): delete and add it", p.Peer, gp.cfg.Address, p.Address)
	}
	if _, err := g.srv.UpdatePeer(ctx, &api.UpdatePeerRequest{Peer: apiPeer(p, gp.vrf, false)}); err != nil {
		return fmt.Errorf("peer %s: %w", p.Peer, err)
	}
	switch old := gp.cfg.BFD; {
	case old != nil && p.BFD == nil:
		g.bfd.Remove(p.Address)
	case old == nil && p.BFD != nil:
		g.startBFD(gp, p)
	case old != nil && *old != *p.BFD:
		g.bfd.SetConfig(p.Address, bfdConfig(p.BFD))
	}
	g.mu.Lock()
	// Shut for dynamicASN or maxReceivedPrefixes: the change may have
	// fixed it, and the back-off starts over.
	shut := gp.asMismatch != "" || !gp.limit.at.IsZero()
	gp.cfg = p
	gp.asMismatch, gp.down, gp.limit = "", downEvent{}, prefixLimit{}
	delete(g.probes, p.Address)
	delete(g.opens, p.Address)
	g.mu.Unlock()
	g.hook.errs.forget(p.Address) // what failed before the change says nothing now
	if shut {
		if err := g.srv.EnablePeer(ctx, &api.EnablePeerRequest{Address: p.Address.String()}); err != nil {
			return fmt.Errorf("peer %s: %w", p.Peer, err)
		}
	}
	return nil
}

// DeletePeer closes the session (Cease, peer de-configured) and drops its
// routes: its VRF, or every route of the global table.
func (g *GoBGP) DeletePeer(ctx context.Context, name string) error {
	g.mu.Lock()
	gp, ok := g.peers[name]
	g.mu.Unlock()
	if !ok {
		return nil
	}
	g.bfd.Remove(gp.cfg.Address)
	if err := g.srv.DeletePeer(ctx, &api.DeletePeerRequest{Address: gp.cfg.Address.String()}); err != nil {
		return fmt.Errorf("peer %s: %w", name, err)
	}
	if gp.vrf != "" {
		if err := g.srv.DeleteVrf(ctx, &api.DeleteVrfRequest{Name: gp.vrf}); err != nil {
			return fmt.Errorf("peer %s: dropping its route table: %w", name, err)
		}
	} else {
		for _, f := range []bgp.Family{bgp.RF_IPv4_UC, bgp.RF_IPv6_UC} {
			if err := g.srv.DeletePath(apiutil.DeletePathRequest{DeleteAll: true, DeleteFamily: &f}); err != nil {
				return fmt.Errorf("peer %s: dropping its routes: %w", name, err)
			}
		}
	}
	g.mu.Lock()
	if g.globalPeer == name {
		g.globalPeer = ""
	}
	delete(g.peers, name)
	delete(g.byAddr, gp.cfg.Address)
	g.mu.Unlock()
	g.hook.errs.forget(gp.cfg.Address)
	return nil
}

// Announce adds or replaces routes in the peer's table.
func (g *GoBGP) Announce(ctx context.Context, peer string, routes []Path) error {
	return g.paths(peer, routes, false)
}

// Withdraw removes routes from the peer's table.
func (g *GoBGP) Withdraw(ctx context.Context, peer string, routes []Path) error {
	return g.paths(peer, routes, true)
}

func (g *GoBGP) paths(peer string, routes []Path, withdraw bool) error {
	if len(routes) == 0 {
		return nil
	}
	g.mu.Lock()
	gp, ok := g.peers[peer]
	var ps []*apiutil.Path
	var err error
	if ok {
		ps, err = g.attrs.paths(routes, withdraw)
	}
	g.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("peer %s does not exist", peer)
	case err != nil:
		return fmt.Errorf("peer %s: %w", peer, err)
	case withdraw:
		err = g.srv.DeletePath(apiutil.DeletePathRequest{VRFID: gp.vrf, Paths: ps})
	default:
		_, err = g.srv.AddPath(apiutil.AddPathRequest{VRFID: gp.vrf, Paths: ps})
	}
	if err != nil {
		return fmt.Errorf("peer %s: %d routes: %w", peer, len(routes), err)
	}
	return nil
}
