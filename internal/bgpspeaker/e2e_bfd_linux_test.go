package bgpspeaker_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/frr"
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
	f, bfdUp := newBFDFabric(t, node, func(c *frr.Config) {
		c.ListenRanges = nil
		c.Neighbors = []frr.Neighbor{{Addr: node, Peer: frr.Peer{RemoteAS: "external", Keepalive: 3 * time.Second, Hold: 9 * time.Second,
			BFD: &frr.BFD{Interval: bfdInterval, Multiplier: bfdMultiplier}}}}
	})
	sp := f.speakers["node-1"]
	// FRR re-keys its BFD session once, one to three seconds after the
	// neighbour's first establishment (a new discriminator and source
	// port): GoBGP 4.8's BFD reset the BGP session for it; Mooring's
	// takes the new session without a failure.
	before := f.routerEstablished(node)
	bfdUp(30 * time.Second)
	time.Sleep(6 * time.Second)
	f.noResets(before, "BFD from the first establishment through FRR's re-keying")
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

// newBFDFabric starts one node with a BFD peer (300 ms × 3) against FRR
// as routerMut configures it, advertising 10.213.0.100, and returns a
// wait for BFD Up on both ends at the router with the node's timers.
func newBFDFabric(t *testing.T, node netip.Addr, routerMut func(*frr.Config)) (*fabric, func(time.Duration)) {
	f := newFabric(t, 1, routerMut)
	f.in.BFDProfiles = []bgp.BFDProfile{{Name: "fast", ReceiveInterval: bfdInterval, TransmitInterval: bfdInterval, DetectMultiplier: bfdMultiplier}}
	p := v4peer()
	p.BFDProfile = "fast"
	f.in.Peers = []bgp.Peer{p}
	f.in.Services = []announce.Service{service("web", false, nil, "10.213.0.100")}
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
