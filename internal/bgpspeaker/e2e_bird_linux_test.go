package bgpspeaker_test

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
)

// The interop tests against BIRD 2 (Debian's bird2 2.0.12): the same
// speaker, sessions and Services as the FRR tests, with BIRD as the
// router. BIRD has explicit neighbours (one `protocol bgp` per session)
// where FRR has listen ranges; otherwise the router is the same: AS
// 64500 at 10.213.0.1 and fd00:213::1, passive, 9/3 s timers,
// graceful-restart helper.

// birdFabric is a fabric whose router is BIRD.
type birdFabric struct {
	*fabric
	bird *birdRouter
}

// node1 is node-1's addresses (internal/netlab: offset 11).
var (
	node1v4 = netip.MustParseAddr("10.213.0.11")
	node1v6 = netip.MustParseAddr("fd00:213::b")
)

// newBirdFabric builds one node and BIRD with cfg's neighbours.
func newBirdFabric(t *testing.T, cfg birdConfig) *birdFabric {
	requireBird(t)
	cfg.RouterID, cfg.ASN = netip.MustParseAddr("10.213.0.1"), routerASN
	bf := &birdFabric{}
	bf.fabric = buildFabric(t, 1, func(f *fabric) { bf.bird = startBird(t, f.router, cfg) })
	return bf
}

// v4Neighbor is BIRD's session with node-1's IPv4 address, carrying both
// families (Mooring's v4peer); v6Neighbor the one with its IPv6 address.
func v4Neighbor() birdNeighbor {
	return birdNeighbor{Name: "node1_v4", Addr: node1v4, ASN: nodeASN, Families: []string{"ipv4", "ipv6"}}
}

func v6Neighbor() birdNeighbor {
	return birdNeighbor{Name: "node1_v6", Addr: node1v6, ASN: nodeASN, Families: []string{"ipv6"}}
}

// birdEstablished waits until BIRD's protocol says Established.
func (bf *birdFabric) birdEstablished(name string) {
	bf.t.Helper()
	eventually(bf.t, 30*time.Second, "bird "+name+" established", func() (bool, string) {
		p, err := bf.bird.protocol(name)
		return err == nil && p.BGPState == "Established", fmt.Sprintf("%+v %v", p, err)
	})
}

// wantBirdRoutes waits until BIRD's routes of prefix satisfy ok.
func (bf *birdFabric) wantBirdRoutes(prefix, what string, ok func([]birdRoute) bool) []birdRoute {
	bf.t.Helper()
	var got []birdRoute
	d := eventually(bf.t, 15*time.Second, "bird: "+prefix+" "+what, func() (bool, string) {
		rs, err := bf.bird.routes(netip.MustParsePrefix(prefix))
		got = rs
		return err == nil && ok(rs), fmt.Sprintf("%+v %v", rs, err)
	})
	bf.t.Logf("bird: %s %s after %v", prefix, what, d.Round(time.Millisecond))
	return got
}

// from returns the routes BIRD learned from protocol proto.
func from(rs []birdRoute, proto string) []birdRoute {
	return slices.DeleteFunc(slices.Clone(rs), func(r birdRoute) bool { return r.Proto != proto })
}

// viaOnly reports whether rs is exactly one route from proto, resolved
// via gw with gw as the BGP next hop's global address (never a v4-mapped
// one).
func viaOnly(rs []birdRoute, proto string, gw netip.Addr) bool {
	mine := from(rs, proto)
	if len(mine) != 1 || len(rs) > 2 {
		return false
	}
	r := mine[0]
	if !slices.Equal(r.Via, []netip.Addr{gw}) || len(r.NextHops) == 0 || r.NextHops[0] != gw {
		return false
	}
	for _, nh := range r.NextHops {
		if nh.Is4In6() || (nh != gw && !nh.IsLinkLocalUnicast()) {
			return false
		}
	}
	return true
}

// TestBirdDualStack: over an IPv4 session carrying both families and an
// IPv6 session, BIRD learns the Service's IPv4 address via the node's
// IPv4 address and its IPv6 address via the node's global IPv6 address on
// both sessions (never a v4-mapped next hop); deleting the Service
// withdraws both.
func TestBirdDualStack(t *testing.T) {
	bf := newBirdFabric(t, birdConfig{Neighbors: []birdNeighbor{v4Neighbor(), v6Neighbor()}})
	bf.in.Peers = []bgp.Peer{v4peer(), v6peer()}
	bf.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100", "fd00:213::100")}
	bf.apply(nil)
	bf.waitEstablished("tor-v4", "tor-v6")
	bf.birdEstablished("node1_v4")
	bf.birdEstablished("node1_v6")
	rs := bf.wantBirdRoutes("10.213.0.100/32", "via node-1 from node1_v4", func(rs []birdRoute) bool {
		return len(rs) == 1 && viaOnly(rs, "node1_v4", node1v4)
	})
	t.Logf("bird's route:\n%s", rs[0].Text)
	rs = bf.wantBirdRoutes("fd00:213::100/128", "via node-1's global IPv6 address from both sessions", func(rs []birdRoute) bool {
		return len(rs) == 2 && viaOnly(rs, "node1_v4", node1v6) && viaOnly(rs, "node1_v6", node1v6)
	})
	for _, r := range rs {
		t.Logf("bird's route:\n%s", r.Text)
	}
	st, _ := bf.speakers["node-1"].session("tor-v4")
	if !slices.Equal(st.Families, []bgp.Family{bgp.IPv4, bgp.IPv6}) {
		t.Fatalf("tor-v4 negotiated %v with BIRD, want both families", st.Families)
	}

	bf.in.Services = nil
	bf.apply(nil)
	bf.wantBirdRoutes("10.213.0.100/32", "withdrawn", func(rs []birdRoute) bool { return len(rs) == 0 })
	bf.wantBirdRoutes("fd00:213::100/128", "withdrawn", func(rs []birdRoute) bool { return len(rs) == 0 })
}

// TestBirdPasswords: with a TCP-MD5 password at BIRD, a wrong one never
// establishes and says AuthFailure, as with FRR; a session for which BIRD
// has no password while the node signs says AuthFailure too; the right
// password establishes.
func TestBirdPasswords(t *testing.T) {
	v4n := v4Neighbor()
	v4n.Password = "s3cret"
	bf := newBirdFabric(t, birdConfig{Neighbors: []birdNeighbor{v4n, v6Neighbor()}})
	v4, v6 := quick(v4peer()), quick(v6peer())
	v4.PasswordSecret, v6.PasswordSecret = "tor", "tor"
	bf.in.Peers = []bgp.Peer{v4, v6}
	bf.apply(map[string]bgpspeaker.Password{"tor": {Value: "wrong"}})
	bf.wantReason("node-1", "tor-v4", bgpspeaker.ReasonAuthFailure, "passwords differ") // BIRD's kernel drops the signature
	bf.wantReason("node-1", "tor-v6", bgpspeaker.ReasonAuthFailure, "no password")      // BIRD has no password
	for _, name := range []string{"node1_v4", "node1_v6"} {
		p, err := bf.bird.protocol(name)
		if err != nil {
			t.Fatal(err)
		}
		if p.BGPState == "Established" || strings.Contains(bf.bird.log(), name+": State changed to up") {
			t.Fatalf("bird's %s came up with a wrong password: %+v", name, p)
		}
	}

	bf.apply(map[string]bgpspeaker.Password{"tor": {Value: "s3cret"}})
	bf.waitEstablished("tor-v4")
	bf.birdEstablished("node1_v4")
	bf.wantReason("node-1", "tor-v6", bgpspeaker.ReasonAuthFailure, "no password")
}

// sinceOf maps each prefix to the import time of BIRD's one route of it
// from proto.
func (bf *birdFabric) sinceOf(proto string, prefixes []string) (map[string]string, error) {
	out := map[string]string{}
	for _, p := range prefixes {
		rs, err := bf.bird.routes(netip.MustParsePrefix(p))
		if err != nil {
			return nil, err
		}
		mine := from(rs, proto)
		if len(mine) != 1 {
			return nil, fmt.Errorf("%s: %d routes from %s: %+v", p, len(mine), proto, rs)
		}
		out[p] = mine[0].Since
	}
	return out, nil
}

// sameImports says whether every route of before has the import time it
// had, to within 100 ms: BIRD has shown one route's time 1 ms later during
// a restart than before it (CI, 10:15:54.840 then .841) with nothing
// re-learned, while a route withdrawn and learned again carries a time
// after the speaker's stop, at least 300 ms after before was read.
func sameImports(before, during map[string]string) bool {
	if len(before) != len(during) {
		return false
	}
	for p, b := range before {
		d, ok := during[p]
		if !ok {
			return false
		}
		tb, err1 := time.Parse("15:04:05.000", b)
		td, err2 := time.Parse("15:04:05.000", d)
		if err1 != nil || err2 != nil {
			if b != d {
				return false
			}
			continue
		}
		if diff := td.Sub(tb); diff < -100*time.Millisecond || diff > 100*time.Millisecond {
			return false
		}
	}
	return true
}

// birdRestartCheck stops node-1's speaker (stop) and checks that BIRD
// detects its graceful restart (no NOTIFICATION received) and keeps the
// routes of keep and gone as they were (the same import time, so not
// withdrawn and learned again). It then starts a new speaker without the
// Services of gone and returns how long BIRD took to get its End-of-RIB
// ("Neighbor graceful restart done"), after which the routes of keep are
// there and those of gone, which nobody refreshed, are flushed.
func (bf *birdFabric) birdRestartCheck(proto string, stop func(*speakerProc), keep, gone []string) time.Duration {
	bf.t.Helper()
	host := bf.lab.Host("node-1")
	all := append(slices.Clone(keep), gone...)
	// The snapshot to compare with: one that holds for 300 ms (BIRD may
	// still be importing the last UPDATE).
	var before map[string]string
	eventually(bf.t, 5*time.Second, "bird's routes from node-1 settled", func() (bool, string) {
		a, err1 := bf.sinceOf(proto, all)
		time.Sleep(300 * time.Millisecond)
		b, err2 := bf.sinceOf(proto, all)
		before = b
		return err1 == nil && err2 == nil && maps.Equal(a, b), fmt.Sprintf("%v %v %v %v", a, b, err1, err2)
	})
	mark := len(bf.bird.log())
	since := func() string { return bf.bird.log()[mark:] }
	stop(bf.speakers["node-1"])
	eventually(bf.t, 5*time.Second, "bird detects the graceful restart", func() (bool, string) {
		p, err := bf.bird.protocol(proto)
		return err == nil && strings.Contains(p.Text, "Neighbor graceful restart active") &&
			strings.Contains(since(), proto+": Neighbor graceful restart detected"), p.Text + since()
	})
	// Still there a while later, untouched.
	time.Sleep(1500 * time.Millisecond)
	during, err := bf.sinceOf(proto, all)
	if err != nil || !sameImports(before, during) {
		bf.t.Fatalf("bird did not keep node-1's routes through the restart: before %v, during %v (%v)", before, during, err)
	}
	p, _ := bf.bird.protocol(proto)
	bf.t.Logf("bird during the restart:\n%s", p.Text)
	if strings.Contains(since(), proto+": Received:") {
		bf.t.Fatalf("bird received a NOTIFICATION when the speaker stopped:\n%s", since())
	}

	start := time.Now()
	bf.speakers["node-1"] = startSpeaker(bf.t, host)
	bf.apply(nil)
	eventually(bf.t, 10*time.Second, "bird's graceful restart of "+proto+" done", func() (bool, string) {
		p, err := bf.bird.protocol(proto)
		return err == nil && p.BGPState == "Established" && !strings.Contains(p.Text, "graceful restart active") &&
			strings.Contains(since(), proto+": Neighbor graceful restart done"), p.Text
	})
	eor := time.Since(start)
	if n := strings.Count(since(), proto+": Got END-OF-RIB"); n < 2 {
		bf.t.Fatalf("bird logged %d End-of-RIBs (want one per family):\n%s", n, since())
	}
	if _, err := bf.sinceOf(proto, keep); err != nil {
		bf.t.Fatalf("after the restart: %v", err)
	}
	for _, p := range gone {
		bf.wantBirdRoutes(p, "flushed at End-of-RIB", func(rs []birdRoute) bool { return len(rs) == 0 })
	}
	return eor
}

// TestBirdGracefulRestart: a speaker that stops on SIGTERM, or dies of
// SIGKILL, sends BIRD no NOTIFICATION; BIRD keeps both families' routes
// in graceful restart, gets the restarted speaker's End-of-RIB for both
// families within 5 s and then flushes the routes it was not sent again.
//
// BIRD 2.0.12 differs from FRR in what it shows: `show route` marks no
// route as stale (its "s" flag is long-lived GR's LLGR_STALE community);
// the restart shows in `show protocols all` ("Neighbor graceful restart
// active", the restart timer) and its log, so that is what is checked.
func TestBirdGracefulRestart(t *testing.T) {
	n := v4Neighbor()
	if os.Getenv("BGPSPEAKER_CHECK_THE_CHECK") != "" { // BIRD without graceful restart: must fail
		n.GracefulRestart = "off"
	}
	bf := newBirdFabric(t, birdConfig{Neighbors: []birdNeighbor{n}})
	bf.in.Peers = []bgp.Peer{v4peer()}
	web := service("web", false, nil, "10.213.0.100", "fd00:213::100")
	keep := []string{"10.213.0.100/32", "fd00:213::100/128"}
	bf.apply(nil)
	bf.waitEstablished("tor-v4")

	for i, c := range []struct {
		name string
		stop func(*speakerProc)
	}{{"SIGTERM", (*speakerProc).terminate}, {"SIGKILL", (*speakerProc).kill}} {
		// old is deleted while node-1 restarts.
		old4, old6 := fmt.Sprintf("10.213.0.%d", 101+i), fmt.Sprintf("fd00:213::%x", 0x101+i)
		bf.in.Services = []*announce.Service{web, service("old", false, nil, old4, old6)}
		bf.apply(nil)
		bf.wantBirdRoutes(keep[0], "from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v4) })
		bf.wantBirdRoutes(keep[1], "from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v6) })
		bf.wantBirdRoutes(old4+"/32", "from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v4) })
		bf.wantBirdRoutes(old6+"/128", "from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v6) })
		bf.in.Services = []*announce.Service{web}
		eor := bf.birdRestartCheck("node1_v4", c.stop, keep, []string{old4 + "/32", old6 + "/128"})
		t.Logf("%s: End-of-RIB at BIRD %v after the new speaker started", c.name, eor)
		if eor > 5*time.Second {
			t.Fatalf("%s: End-of-RIB %v after the restart, want <= 5 s", c.name, eor)
		}
	}
}

// TestBirdBFD: BIRD's bfd protocol and the speaker's BFD come Up with
// each other at 300 ms × 3 and the session then stays up; when BIRD's
// BFD packets are lost (BGP's still flow) the speaker's BFD expires and
// resets the session with reason BFDDown well inside the 9 s hold time;
// when they pass again, BFD and the session come back. Unlike FRR,
// BIRD 2.0.12 flushes a restarting agent's routes once BFD goes down
// (bfdRestartFlushes).
func TestBirdBFD(t *testing.T) {
	n := v4Neighbor()
	n.BFD = true
	bf := newBirdFabric(t, birdConfig{Neighbors: []birdNeighbor{n}, BFDInterval: bfdInterval, BFDMultiplier: bfdMultiplier})
	bf.in.BFDProfiles = []bgp.BFDProfile{{Name: "fast", ReceiveInterval: bfdInterval, TransmitInterval: bfdInterval, DetectMultiplier: bfdMultiplier}}
	p := v4peer()
	p.BFDProfile = "fast"
	bf.in.Peers = []bgp.Peer{p}
	bf.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100")}
	bf.apply(nil)
	up := bf.bfdUp(30 * time.Second)
	out, _ := bf.bird.birdc("show bfd sessions")
	t.Logf("bird:\n%s", out)
	time.Sleep(4 * time.Second)
	if st := bf.bfdUp(time.Second); !st.Established.Equal(up.Established) {
		t.Fatalf("the session was reset in steady state: established %v, then %v", up.Established, st.Established)
	}
	bf.bfdLossResets()
	bf.bfdRestartFlushes()
}

// bfdUp waits until BFD is Up on both ends with 300 ms × 3 at BIRD and
// the session is Established, and returns the speaker's session.
func (bf *birdFabric) bfdUp(within time.Duration) bgpspeaker.SessionState {
	bf.t.Helper()
	var st bgpspeaker.SessionState
	eventually(bf.t, within, "BFD up on both ends", func() (bool, string) {
		st, _ = bf.speakers["node-1"].session("tor-v4")
		ss, err := bf.bird.bfdSessions()
		ok := err == nil && st.State == bgpspeaker.StateEstablished && st.BFD == bgpspeaker.BFDUp && len(ss) == 1 &&
			ss[0].Addr == node1v4 && ss[0].State == "Up" && ss[0].Interval == bfdInterval && ss[0].Timeout == bfdMultiplier*bfdInterval
		return ok, fmt.Sprintf("speaker %+v; bird %+v %v", st, ss, err)
	})
	return st
}

// bfdLossResets drops BIRD's BFD packets until the speaker resets the
// session for BFD (within 3 s), then lets them pass and waits for BFD
// and the session.
func (bf *birdFabric) bfdLossResets() {
	t := bf.t
	t.Helper()
	dropped := time.Now()
	if err := bf.bird.dropBFD(true); err != nil {
		t.Fatal(err)
	}
	undone := false
	t.Cleanup(func() {
		if !undone {
			_ = bf.bird.dropBFD(false)
		}
	})
	var at time.Duration
	eventually(t, 10*time.Second, "the speaker's BFD resets the session", func() (bool, string) {
		st, _ := bf.speakers["node-1"].session("tor-v4")
		at = time.Since(dropped)
		return st.State != bgpspeaker.StateEstablished && st.Reason == bgpspeaker.ReasonBFDDown, fmt.Sprintf("%+v", st)
	})
	t.Logf("bird's BFD packets dropped: the session was reset with reason BFDDown after %s", at)
	if at > 3*time.Second {
		t.Fatalf("BFD took %v to reset the session, want well inside the 9 s hold time", at)
	}
	if err := bf.bird.dropBFD(false); err != nil {
		t.Fatal(err)
	}
	undone = true
	bf.bfdUp(30 * time.Second)
}

// bfdRestartFlushes: an agent restart with BFD. The speaker's BFD stops
// with it; BIRD detects the graceful restart when the connection closes,
// but when BFD then goes down it stops the protocol and flushes the
// node's routes: BIRD 2.0.12 has no setting to keep them (FRR keeps
// them, TestBFD). This pins that behaviour down, then checks the new
// speaker brings BFD, the session and the route back.
func (bf *birdFabric) bfdRestartFlushes() {
	t := bf.t
	t.Helper()
	const prefix = "10.213.0.100/32"
	bf.wantBirdRoutes(prefix, "from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v4) })
	mark := len(bf.bird.log())
	stopped := time.Now()
	bf.speakers["node-1"].terminate()
	bf.wantBirdRoutes(prefix, "flushed when BFD went down during the restart", func(rs []birdRoute) bool { return len(rs) == 0 })
	flushed := time.Since(stopped)
	l := bf.bird.log()[mark:]
	gr, down := strings.Index(l, "node1_v4: Neighbor graceful restart detected"), strings.Index(l, "node1_v4: BFD session down")
	if gr < 0 || down < gr {
		t.Fatalf("bird's log since SIGTERM, want graceful restart detected, then BFD session down:\n%s", l)
	}
	if p, err := bf.bird.protocol("node1_v4"); err != nil || !strings.Contains(p.Text, "BFD session down") {
		t.Fatalf("bird's node1_v4 after SIGTERM with BFD: %v\n%s", err, p.Text)
	}
	t.Logf("SIGTERM with BFD: bird flushed node-1's route %v after SIGTERM (BFD session down during graceful restart)", flushed.Round(time.Millisecond))
	bf.speakers["node-1"] = startSpeaker(t, bf.lab.Host("node-1"))
	bf.apply(nil)
	bf.bfdUp(30 * time.Second)
	bf.wantBirdRoutes(prefix, "back from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v4) })
}

// TestBirdBFDRouterRestart: BIRD restarts (killed and started again)
// while the node's session has BFD; BFD and the session come back and
// stay up. With GoBGP 4.8's BFD they did not always (4 of 7 runs flapped
// every ~4 s for as long as the test waited): its BFD expired while the
// BGP session was down (BIRD's new process has a new discriminator GoBGP
// did not take), and the Cease its ResetPeer queued ("BFD is down") was
// sent the moment the next session came up; BIRD restarted the protocol
// and its BFD session, with a new discriminator again, and so on.
// Mooring's BFD takes the new discriminator (internal/bfd).
func TestBirdBFDRouterRestart(t *testing.T) {
	n := v4Neighbor()
	n.BFD = true
	cfg := birdConfig{Neighbors: []birdNeighbor{n}, BFDInterval: bfdInterval, BFDMultiplier: bfdMultiplier}
	bf := newBirdFabric(t, cfg)
	bf.in.BFDProfiles = []bgp.BFDProfile{{Name: "fast", ReceiveInterval: bfdInterval, TransmitInterval: bfdInterval, DetectMultiplier: bfdMultiplier}}
	p := v4peer()
	p.BFDProfile = "fast"
	bf.in.Peers = []bgp.Peer{p}
	bf.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100")}
	bf.apply(nil)
	bf.bfdUp(30 * time.Second)
	_ = bf.bird.proc.Kill()
	_ = bf.bird.proc.Wait()
	cfg.RouterID, cfg.ASN = netip.MustParseAddr("10.213.0.1"), routerASN
	bf.bird = startBird(t, bf.router, cfg)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(bf.speakers["node-1"].log)
			t.Logf("speaker log:\n%s", b)
		}
	})
	up := bf.bfdUp(40 * time.Second)
	time.Sleep(8 * time.Second) // two of the old loop's flaps
	if now := bf.bfdUp(time.Second); !now.Established.Equal(up.Established) {
		t.Fatalf("the session was reset after BIRD's restart: established %s, then %s", up.Established, now.Established)
	}
	bf.wantBirdRoutes("10.213.0.100/32", "from node-1", func(rs []birdRoute) bool { return viaOnly(rs, "node1_v4", node1v4) })
}

// floodRoutes is what TestBirdFloodIsCut's router sends: more than the
// default maxReceivedPrefixes (bgp.DefaultMaxReceived), as a router that
// sends the nodes a large table would; BGPSPEAKER_FLOOD sets another
// number (1000000: about a full Internet table).
func floodRoutes() int {
	if n, err := strconv.Atoi(os.Getenv("BGPSPEAKER_FLOOD")); err == nil && n > 0 {
		return n
	}
	return bgp.DefaultMaxReceived + 20000
}

// TestBirdFloodIsCut: BIRD sends node-1 120,000 IPv4 routes on one of its
// two sessions. With the default limit the node closes that session
// (a Cease, Administrative Shutdown, saying why), says
// MaxPrefixesExceeded with the time it opens again, keeps it shut, and
// drops what it received from memory; the other session is never reset
// and keeps the Service's route at BIRD.
func TestBirdFloodIsCut(t *testing.T) {
	v4n := v4Neighbor()
	v4n.Flood = true
	flood := floodRoutes()
	bf := newBirdFabric(t, birdConfig{Neighbors: []birdNeighbor{v4n, v6Neighbor()}, Flood4: flood})
	sp := bf.speakers["node-1"]
	base, err := sp.call(command{Op: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	bf.in.Peers = []bgp.Peer{v6peer()}
	bf.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100", "fd00:213::100")}
	bf.apply(nil)
	bf.waitEstablished("tor-v6")
	bf.birdEstablished("node1_v6")
	bf.wantBirdRoutes("fd00:213::100/128", "from node1_v6", func(rs []birdRoute) bool { return len(from(rs, "node1_v6")) == 1 })
	v6Ups := strings.Count(bf.bird.log(), "node1_v6: State changed to up")
	idle := hwm(sp.proc.PID)

	start := time.Now()
	bf.in.Peers = []bgp.Peer{v4peer(), v6peer()} // tor-v4: the default limit
	bf.apply(nil)
	st := bf.wantReason("node-1", "tor-v4", bgpspeaker.ReasonMaxPrefixesExceeded, fmt.Sprintf("more than %d IPv4 prefixes", bgp.DefaultMaxReceived), "opens again at")
	cut := time.Since(start)
	eventually(t, 10*time.Second, "BIRD: node1_v4 closed", func() (bool, string) {
		p, err := bf.bird.protocol("node1_v4")
		return err == nil && p.BGPState != "Established", fmt.Sprintf("%+v %v", p, err)
	})
	// How BIRD saw it close: the Cease, or — when it was still sending —
	// a reset connection (the node's kernel answers unread data with a
	// RST, which discards the Cease), which a graceful-restart helper
	// takes for a restart.
	for _, f := range []string{bf.bird.log(), readFile(t, sp.log)} {
		for l := range strings.Lines(f) {
			if strings.Contains(l, "maxReceivedPrefixes") || strings.Contains(l, "maximum number of prefixes") || strings.Contains(l, "node1_v4: Connection lost") {
				t.Logf("%s", strings.TrimSpace(l))
			}
		}
	}
	peak := hwm(sp.proc.PID)
	time.Sleep(5 * time.Second) // it stays shut: no reconnect before its time
	if got, _ := sp.session("tor-v4"); got.Reason != bgpspeaker.ReasonMaxPrefixesExceeded || got.Message != st.Message {
		t.Fatalf("tor-v4 did not stay shut with its reason: %+v", got)
	}
	if p, err := bf.bird.protocol("node1_v4"); err != nil || p.BGPState == "Established" {
		t.Fatalf("bird's node1_v4 is up again: %+v %v", p, err)
	}
	after, err := sp.call(command{Op: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	grown := (float64(after.HeapInuse) - float64(base.HeapInuse)) / (1 << 20)
	// Kept, 120,000 routes would be ~75 MiB (0.65 KiB each).
	if grown > 10 {
		t.Errorf("the speaker's heap grew %.1f MiB over the flood: what the router sent was not dropped", grown)
	}
	if n := strings.Count(bf.bird.log(), "node1_v6: State changed to up"); n != v6Ups {
		t.Fatalf("the other session was reset: BIRD saw node1_v6 come up %d times, %d before", n, v6Ups)
	}
	if got, _ := sp.session("tor-v6"); got.State != bgpspeaker.StateEstablished {
		t.Fatalf("tor-v6 %+v", got)
	}
	bf.wantBirdRoutes("fd00:213::100/128", "still from node1_v6", func(rs []birdRoute) bool { return len(from(rs, "node1_v6")) == 1 })
	t.Logf("%d routes sent: session closed with MaxPrefixesExceeded %v after the peer was added; speaker heap %.1f MiB before, %.1f MiB after (GC'd), %s before the flood, %s peak",
		flood, cut.Round(time.Millisecond), float64(base.HeapInuse)/(1<<20), float64(after.HeapInuse)/(1<<20), idle, peak)
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
