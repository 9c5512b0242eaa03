package bgpspeaker_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	mbfd "github.com/mooringlb/mooring/internal/bfd"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/netlab"
)

// bfdFast is the BFD timers of TestBFD on both ends: 300 ms × 3.
const (
	bfdInterval   = 300 * time.Millisecond
	bfdMultiplier = 3
)

// TestBFD runs BFD between the speaker and FRR 8.4 with the node as a
// configured neighbour (docs/bgp.md, "BFD against FRR"): BFD comes Up on
// both ends with each end's 300 ms × 3, and the session then stays up,
// through FRR's re-keying of its BFD session too; a
// router whose bfdd hangs makes the speaker's BFD expire in under a
// second, which resets the session, and the status says BFDDown; when
// bfdd is back, so are BFD and the session. An agent restart (SIGTERM)
// still keeps the node's route at the router as stale although its BFD
// goes quiet too: the session closed first, and FRR does not flush a
// restarting peer's routes when BFD then goes down.
func TestBFD(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.11") // node-1 (internal/netlab)
	f, bfdUp := newBFDFabric(t, node, configuredBFD(node))
	sp := f.speakers["node-1"]
	// FRR re-keys its BFD session once, one to three seconds after the
	// neighbour's first establishment (a new discriminator and source
	// port): GoBGP 4.8's BFD reset the BGP session for it; Mooring's
	// takes the new session without a failure.
	f.routerEstablished(node)
	bfdUp(30 * time.Second)
	time.Sleep(6 * time.Second)
	f.establishedOnce(node, "BFD from the first establishment through FRR's re-keying")
	bfdUp(time.Second)

	if err := f.frr.Pause("bfdd"); err != nil {
		t.Fatal(err)
	}
	paused := time.Now()
	resumed := false
	t.Cleanup(func() {
		if !resumed {
			_ = f.frr.Resume("bfdd")
		}
	})
	var at time.Duration
	eventually(t, 10*time.Second, "the speaker's BFD resets the session", func() (bool, string) {
		st, _ := sp.session("tor-v4")
		at = time.Since(paused)
		return st.State != bgpspeaker.StateEstablished && st.Reason == bgpspeaker.ReasonBFDDown, fmt.Sprintf("%+v", st)
	})
	t.Logf("bfdd paused: the session was reset with reason BFDDown after %s", at)
	if err := f.frr.Resume("bfdd"); err != nil {
		t.Fatal(err)
	}
	resumed = true
	bfdUp(30 * time.Second)

	f.wantNextHops("10.213.0.100/32", node.String())
	eor := f.restartCheck("node-1", (*speakerProc).terminate)
	t.Logf("SIGTERM with BFD: End-of-RIB %v after the new speaker started", eor)
	sp = f.speakers["node-1"]
	bfdUp(30 * time.Second)
}

// TestBFDUpBeforeBGP: the router refuses BGP connections for a few
// seconds, as when the first connection attempts collide — long enough
// for BFD to come Up first, the order in which a CI run saw the node's
// session reset. FRR 8.4 moves a configured neighbour's BFD session to the
// BGP connection's addresses at the first establishment (closing the old
// one with a Down) and its bgpd resets the BGP session if the old one was
// Up (FRR issue 17337). So the node's BFD stays silent until its BGP
// session is Established (docs/bgp.md, "BFD against FRR"): BFD is not Up
// at either end while BGP is refused; once BGP is let through the
// session comes up once, is never reset, and BFD comes Up on both ends.
func TestBFDUpBeforeBGP(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.11")
	var unblock func()
	f, bfdUp := newBFDFabric(t, node, configuredBFD(node), func(f *fabric) { unblock = refuseBGP(t, f.router) })
	sp := f.speakers["node-1"]
	ctx := context.Background()
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		st, _ := sp.session("tor-v4")
		peers, err := f.frr.BFDPeers(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.State == bgpspeaker.StateEstablished || st.BFD == bgpspeaker.BFDUp || len(peers) > 0 && peers[0].Status == "up" {
			t.Fatalf("BGP refused: the node's session %+v, the router's BFD %+v; want BGP not Established and BFD Up at neither end", st, peers)
		}
	}
	unblock()
	f.routerEstablished(node)
	bfdUp(30 * time.Second)
	time.Sleep(6 * time.Second)
	f.establishedOnce(node, "BGP established after 4 s refused, through FRR's move of its BFD session")
	bfdUp(time.Second)
	f.wantNextHops("10.213.0.100/32", node.String())
}

// TestBFDRouterWaitsForBFD: a router that lets BGP up only once BFD is Up
// ("BFD strict mode", FRR 9's `neighbor ... bfd strict`; not in 8.4, so
// played here by refusing BGP until the router's BFD session is up). The
// node's BFD, which otherwise waits for BGP, starts bfdWithoutBGP (10 s)
// after BGP failed to come up; then BGP comes up and BFD is Up on both
// ends. (FRR 8.4 then resets the session once, moving its Up BFD session:
// TestBFDUpBeforeBGP.)
func TestBFDRouterWaitsForBFD(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.11")
	var unblock func()
	f, bfdUp := newBFDFabric(t, node, configuredBFD(node), func(f *fabric) { unblock = refuseBGP(t, f.router) })
	ctx := context.Background()
	took := eventually(t, 30*time.Second, "the router's BFD up while BGP is refused", func() (bool, string) {
		peers, err := f.frr.BFDPeers(ctx)
		return err == nil && len(peers) == 1 && peers[0].Status == "up", fmt.Sprintf("%+v %v", peers, err)
	})
	t.Logf("BGP refused: the router's BFD up %s after the peer was applied", took.Round(time.Millisecond))
	if took < 8*time.Second {
		t.Errorf("BFD up %s after the peer was applied, want it to wait ~10 s for BGP first", took)
	}
	unblock()
	bfdUp(30 * time.Second)
	f.wantNextHops("10.213.0.100/32", node.String())
}

// establishedOnce fails unless the router's configured neighbour node is
// Established and has been since its first establishment: a reset within
// the first moments would escape a snapshot taken at establishment, the
// counters since bgpd started do not.
func (f *fabric) establishedOnce(node netip.Addr, what string) {
	f.t.Helper()
	s := f.snapshotNeighbors()[node]
	if s.State != "Established" || s.ConnectionsEstablished != 1 || s.ConnectionsDropped != 0 {
		f.t.Fatalf("%s: the router's session with %s was reset: %+v", what, node, s)
	}
}

// refuseBGP makes h's kernel refuse BGP connections both ways (a TCP
// reset, so the speakers retry at their connect time) until the returned
// func is called.
func refuseBGP(t *testing.T, h *netlab.Host) func() {
	t.Helper()
	nft := func(script string) {
		if err := h.Nft(script); err != nil {
			t.Fatal(err)
		}
	}
	nft("table inet mooring_refuse_bgp {\n chain in {\n  type filter hook input priority 0; policy accept;\n" +
		"  tcp dport 179 reject with tcp reset\n  tcp sport 179 reject with tcp reset\n }\n}\n")
	return sync.OnceFunc(func() { nft("delete table inet mooring_refuse_bgp\n") })
}

// TestBFDListenRange runs BFD with the node as a dynamic neighbour of an
// FRR listen range, which FRR re-keys at every establishment (GoBGP 4.8's
// BFD reset such a session three seconds after every establishment, so
// it never stayed up): BFD comes Up on both ends and nothing resets.
func TestBFDListenRange(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.11")
	f, bfdUp := newBFDFabric(t, node, func(c *frr.Config) {
		c.Dynamic.BFD = &frr.BFD{Interval: bfdInterval, Multiplier: bfdMultiplier}
	})
	before := f.routerEstablished(node)
	bfdUp(30 * time.Second)
	time.Sleep(6 * time.Second)
	f.noResets(before, "BFD over a listen range")
	bfdUp(time.Second)
	f.wantNextHops("10.213.0.100/32", node.String())
}

// TestBFDProfileChange changes the BFD profile of a live session against
// FRR 8.4, 300 ms → 1 s → 300 ms (both intervals), and requires each change
// in place: the router sees the node's new intervals within seconds (a
// Poll Sequence, RFC 5880 §6.8.3: slower sending only after the router's
// Final), BFD stays Up on both ends (FRR's BFD uptime never restarts), and
// the BGP session is not reset.
func TestBFDProfileChange(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.11")
	f, bfdUp := newBFDFabric(t, node, configuredBFD(node))
	sp := f.speakers["node-1"]
	before := f.routerEstablished(node)
	bfdUp(30 * time.Second)
	time.Sleep(6 * time.Second) // past FRR's re-keying (TestBFD)
	ctx := context.Background()
	uptime := func() time.Duration {
		t.Helper()
		peers, err := f.frr.BFDPeers(ctx)
		if err != nil || len(peers) != 1 || peers[0].Status != "up" {
			t.Fatalf("the router's BFD: %+v %v, want one peer up", peers, err)
		}
		return peers[0].Uptime
	}
	start, up0 := time.Now(), uptime()
	for _, iv := range []time.Duration{time.Second, bfdInterval} {
		f.in.BFDProfiles[0].ReceiveInterval, f.in.BFDProfiles[0].TransmitInterval = iv, iv
		f.apply(nil)
		took := eventually(t, 10*time.Second, fmt.Sprintf("the router sees the node's BFD intervals at %s", iv), func() (bool, string) {
			peers, err := f.frr.BFDPeers(ctx)
			ok := err == nil && len(peers) == 1 && peers[0].Status == "up" && peers[0].RemoteTransmit == iv && peers[0].RemoteReceive == iv
			return ok, fmt.Sprintf("%+v %v", peers, err)
		})
		t.Logf("BFD profile → %s: the router had the node's new intervals after %s", iv, took)
		time.Sleep(3 * time.Second) // several detection times at the new rate
		if st, _ := sp.session("tor-v4"); st.State != bgpspeaker.StateEstablished || st.BFD != bgpspeaker.BFDUp {
			t.Fatalf("after the change to %s: the node's session %+v, want Established with BFD Up", iv, st)
		}
	}
	// FRR counts uptime in whole seconds: a BFD flap would restart it.
	if up, want := uptime(), up0+time.Since(start)-2*time.Second; up < want {
		t.Errorf("the router's BFD uptime %s after the changes, want ≥ %s: BFD went down and came back", up, want)
	}
	f.noResets(before, "changing the BFD profile")
}

// TestBFDPortTaken: another daemon on the node (a bfdd of its own) holds
// BFD's UDP port 3784 in the node's network namespace when the speaker
// gets its BFD peer. The BGP session still comes up (BFD cannot fail
// it), BFD shows Down on the speaker and is not up at the router; once the
// port is free the node's BFD starts by itself (every status listing
// tries again), comes Up on both ends, and the session is not reset.
func TestBFDPortTaken(t *testing.T) {
	node := netip.MustParseAddr("10.213.0.11")
	var held net.PacketConn
	f, bfdUp := newBFDFabric(t, node, configuredBFD(node), func(f *fabric) {
		err := f.lab.Nodes()[0].Do(func() error {
			var err error
			held, err = net.ListenPacket("udp4", fmt.Sprintf("0.0.0.0:%d", mbfd.Port))
			return err
		})
		if err != nil {
			t.Fatalf("holding UDP %d in node-1's namespace: %v", mbfd.Port, err)
		}
		t.Cleanup(func() { _ = held.Close() })
	})
	sp := f.speakers["node-1"]
	before := f.routerEstablished(node)
	ctx := context.Background()
	eventually(t, 10*time.Second, "the session established, BFD Down", func() (bool, string) {
		st, _ := sp.session("tor-v4")
		return st.State == bgpspeaker.StateEstablished && st.BFD == bgpspeaker.BFDDown, fmt.Sprintf("%+v", st)
	})
	time.Sleep(3 * time.Second) // a few of the speaker's retries
	st, _ := sp.session("tor-v4")
	peers, err := f.frr.BFDPeers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.BFD != bgpspeaker.BFDDown || len(peers) != 1 || peers[0].Status == "up" {
		t.Fatalf("BFD with its port taken on the node: speaker %+v, router %+v; want Down on both ends", st, peers)
	}
	if err := held.Close(); err != nil {
		t.Fatal(err)
	}
	bfdUp(30 * time.Second)
	f.noResets(before, "BFD starting once its port was free")
}

// configuredBFD makes the router's neighbour node a configured one (not a
// listen range's) with BFD 300 ms × 3.
func configuredBFD(node netip.Addr) func(*frr.Config) {
	return func(c *frr.Config) {
		c.ListenRanges = nil
		c.Neighbors = []frr.Neighbor{{Addr: node, Peer: frr.Peer{RemoteAS: "external", Keepalive: 3 * time.Second, Hold: 9 * time.Second,
			BFD: &frr.BFD{Interval: bfdInterval, Multiplier: bfdMultiplier}}}}
	}
}

// newBFDFabric starts one node with a BFD peer (300 ms × 3) against FRR
// as routerMut configures it, advertising 10.213.0.100, and returns a
// wait for BFD Up on both ends at the router with the node's timers.
// Each of beforeApply runs once the node and the router are up, before
// the speaker gets its peer.
func newBFDFabric(t *testing.T, node netip.Addr, routerMut func(*frr.Config), beforeApply ...func(*fabric)) (*fabric, func(time.Duration)) {
	f := newFabric(t, 1, routerMut)
	for _, fn := range beforeApply {
		fn(f)
	}
	f.in.BFDProfiles = []bgp.BFDProfile{{Name: "fast", ReceiveInterval: bfdInterval, TransmitInterval: bfdInterval, DetectMultiplier: bfdMultiplier}}
	p := v4peer()
	p.BFDProfile = "fast"
	f.in.Peers = []bgp.Peer{p}
	f.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100")}
	f.apply(nil)
	ctx := context.Background()
	return f, func(within time.Duration) {
		t.Helper()
		eventually(t, within, "BFD up on both ends", func() (bool, string) {
			st, _ := f.speakers["node-1"].session("tor-v4")
			peers, err := f.frr.BFDPeers(ctx)
			ok := err == nil && st.State == bgpspeaker.StateEstablished && st.BFD == bgpspeaker.BFDUp && len(peers) == 1 &&
				peers[0].Peer == node && peers[0].Status == "up" &&
				peers[0].RemoteTransmit == bfdInterval && peers[0].RemoteDetectMultiplier == bfdMultiplier
			return ok, fmt.Sprintf("speaker %+v; router %+v %v", st, peers, err)
		})
	}
}

// routerEstablished waits until the router shows its session with node
// established and returns its sessions then.
func (f *fabric) routerEstablished(node netip.Addr) map[netip.Addr]frr.Session {
	f.t.Helper()
	var ns map[netip.Addr]frr.Session
	eventually(f.t, 30*time.Second, "the router's session with "+node.String()+" established", func() (bool, string) {
		ns = f.snapshotNeighbors()
		s := ns[node]
		return s.State == "Established" && !s.Established.IsZero(), fmt.Sprintf("%+v", s)
	})
	return ns
}
