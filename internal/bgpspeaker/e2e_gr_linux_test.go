package bgpspeaker_test

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/frr"
)

// pathOf returns the path of prefix whose next hop is nh.
func (f *fabric) pathOf(prefix, nh string) (frr.Path, bool) {
	for _, p := range f.paths(prefix) {
		for _, n := range p.Nexthops {
			if n.String() == nh {
				return p, true
			}
		}
	}
	return frr.Path{}, false
}

// restartCheck stops one node's speaker (stop), checks the router keeps
// its route as stale and got no NOTIFICATION, starts a new speaker and
// returns how long the router took to get End-of-RIB from it (the stale
// mark gone).
func (f *fabric) restartCheck(node string, stop func(*speakerProc)) time.Duration {
	f.t.Helper()
	var host = f.lab.Host(node)
	nh := host.Addr4.String()
	const prefix = "10.213.0.100/32"
	stop(f.speakers[node])
	eventually(f.t, 5*time.Second, node+"'s route kept as stale", func() (bool, string) {
		p, ok := f.pathOf(prefix, nh)
		return ok && p.Stale, fmt.Sprintf("%+v (found %v)", p, ok)
	})
	// Still there a while later (not withdrawn at the hold time either).
	time.Sleep(1500 * time.Millisecond)
	if p, ok := f.pathOf(prefix, nh); !ok || !p.Stale {
		f.t.Fatalf("%s's stale route went away: %+v", node, p)
	}
	if strings.Contains(f.frr.LogTail("bgpd", 100000), "NOTIFICATION: received from neighbor "+nh) {
		f.t.Fatalf("the router received a NOTIFICATION from %s when its speaker stopped", node)
	}
	start := time.Now()
	f.speakers[node] = startSpeaker(f.t, host)
	f.apply(nil)
	eventually(f.t, 10*time.Second, node+"'s route refreshed (End-of-RIB)", func() (bool, string) {
		p, ok := f.pathOf(prefix, nh)
		return ok && !p.Stale && p.Valid, fmt.Sprintf("%+v", p)
	})
	return time.Since(start)
}

// TestGracefulRestart: an agent that stops on SIGTERM, or dies of SIGKILL,
// sends no NOTIFICATION; the router keeps its route as stale; the
// restarted speaker's End-of-RIB refreshes it within 5 s, and the other
// node's session is never touched.
func TestGracefulRestart(t *testing.T) {
	f := newFabric(t, 2, nil)
	f.in.Peers = []bgp.Peer{v4peer()}
	f.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100")}
	f.apply(nil)
	f.waitEstablished("tor-v4")
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4)...)
	other := f.lab.Host("node-2").Addr4
	before := f.snapshotNeighbors()

	eor := f.restartCheck("node-1", (*speakerProc).terminate)
	t.Logf("SIGTERM: End-of-RIB %v after the new speaker started", eor)
	if eor > 5*time.Second {
		t.Fatalf("End-of-RIB %v after the restart, want <= 5 s", eor)
	}
	f.noResets(map[netip.Addr]frr.Session{other: before[other]}, "restarting node-1")

	eor = f.restartCheck("node-1", (*speakerProc).kill)
	t.Logf("SIGKILL: End-of-RIB %v after the new speaker started", eor)
	if eor > 5*time.Second {
		t.Fatalf("End-of-RIB %v after the restart, want <= 5 s", eor)
	}
	f.noResets(map[netip.Addr]frr.Session{other: before[other]}, "restarting node-1")
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4)...)
}
