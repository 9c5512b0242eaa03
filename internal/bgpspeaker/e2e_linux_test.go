package bgpspeaker_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/ipalloc"
	"github.com/mooringlb/mooring/internal/netlab"
)

const (
	routerASN = 64500
	nodeASN   = 64512
)

// fabric is a lab of node speakers and one FRR router.
type fabric struct {
	t        *testing.T
	lab      *netlab.Lab
	router   *netlab.Host
	frr      *frrRouter
	speakers map[string]*speakerProc
	in       bgp.Input
}

// frrConf is the router's configuration: eBGP with every node over IPv4
// (both families) and IPv6 (IPv6 only), from listen ranges, ECMP on.
func frrConf(extra string) string {
	return fmt.Sprintf(`frr defaults datacenter
hostname router
router bgp %d
 bgp router-id 10.213.0.1
 no bgp ebgp-requires-policy
 bgp bestpath as-path multipath-relax
 neighbor nodes4 peer-group
 neighbor nodes4 remote-as external
 neighbor nodes4 timers 3 9
 neighbor nodes6 peer-group
 neighbor nodes6 remote-as external
 neighbor nodes6 timers 3 9
%s bgp listen range 10.213.0.0/24 peer-group nodes4
 bgp listen range fd00:213::/64 peer-group nodes6
 address-family ipv4 unicast
  maximum-paths 16
 exit-address-family
 address-family ipv6 unicast
  neighbor nodes4 activate
  neighbor nodes6 activate
  maximum-paths 16
 exit-address-family
`, routerASN, extra)
}

// newFabric builds n nodes and the router and starts a speaker per node;
// nothing is applied yet.
func newFabric(t *testing.T, n int, frrExtra string) *fabric {
	netlab.RequirePrivileges(t)
	requireFRR(t)
	lab := netlab.NewForTest(t, netlab.Config{Nodes: n})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	router, err := lab.AttachHost(ctx, "router", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = router.Release() })
	f := &fabric{t: t, lab: lab, router: router, speakers: map[string]*speakerProc{}}
	f.frr = startFRR(t, router, frrConf(frrExtra))
	for _, h := range lab.Nodes() {
		f.in.Nodes = append(f.in.Nodes, bgp.Node{Name: h.Name, Addresses: []netip.Addr{h.Addr4, h.Addr6}})
		f.speakers[h.Name] = startSpeaker(t, h)
	}
	f.in.Pools = []bgp.Pool{{Name: "default", Ranges: []ipalloc.Range{
		ipalloc.PrefixRange(netip.MustParsePrefix("10.213.0.96/27")), ipalloc.PrefixRange(netip.MustParsePrefix("fd00:213::100/120")),
	}}}
	f.in.Advertisements = []bgp.Advertisement{{Name: "all", LoadBalancerIPs: true}}
	return f
}

// v4peer and v6peer are the router's two sessions with every node.
func v4peer() bgp.Peer {
	return bgp.Peer{Name: "tor-v4", MyASN: nodeASN, PeerASN: routerASN, Address: netip.MustParseAddr("10.213.0.1"),
		Families: []bgp.Family{bgp.IPv4, bgp.IPv6}, GracefulRestart: true}
}

func v6peer() bgp.Peer {
	return bgp.Peer{Name: "tor-v6", MyASN: nodeASN, PeerASN: routerASN, Address: netip.MustParseAddr("fd00:213::1"), GracefulRestart: true}
}

func service(name string, local bool, ready []string, ips ...string) announce.Service {
	s := announce.Service{Key: announce.ServiceKey{Namespace: "default", Name: name}, LocalTraffic: local, ReadyNodes: ready}
	for _, ip := range ips {
		s.IngressIPs = append(s.IngressIPs, netip.MustParseAddr(ip))
	}
	return s
}

// apply decides for every node and applies the result to its speaker;
// passwords maps Secret names to passwords.
func (f *fabric) apply(passwords map[string]bgpspeaker.Password) {
	f.t.Helper()
	res := bgp.Decide(f.in)
	for _, p := range res.Problems {
		f.t.Logf("decision problem: %+v", p)
	}
	for _, n := range res.Nodes {
		if sp := f.speakers[n.Node]; sp != nil && sp.proc != nil {
			select {
			case <-sp.proc.Done():
				continue
			default:
			}
			sp.apply(bgpspeaker.Desired{Node: n, Passwords: passwords})
		}
	}
}

// eventually polls cond every 50 ms until it holds or within passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	var last string
	for time.Since(start) < within {
		ok, msg := cond()
		if ok {
			return time.Since(start)
		}
		last = msg
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s: not within %s (last: %s)", what, within, last)
	return 0
}

// wantNextHops waits until prefix has exactly the given next hops.
func (f *fabric) wantNextHops(prefix string, want ...string) time.Duration {
	f.t.Helper()
	want = sortedStrings(want)
	return eventually(f.t, 15*time.Second, "next hops of "+prefix, func() (bool, string) {
		got := f.frr.nextHops(prefix)
		if slices.Equal(got, want) {
			return true, ""
		}
		table, _ := f.frr.vtysh("show bgp ipv4 unicast", "show bgp ipv6 unicast", "show bgp summary")
		return false, fmt.Sprintf("%v, want %v; router:\n%s", got, want, table)
	})
}

// waitEstablished waits until every node's named sessions are up.
func (f *fabric) waitEstablished(peers ...string) {
	f.t.Helper()
	for name, sp := range f.speakers {
		for _, p := range peers {
			eventually(f.t, 30*time.Second, name+"/"+p+" established", func() (bool, string) {
				st, ok := sp.session(p)
				return ok && st.State == bgpspeaker.StateEstablished, fmt.Sprintf("%+v", st)
			})
		}
	}
}

// snapshotNeighbors records FRR's per-session uptime counters.
func (f *fabric) snapshotNeighbors() map[string]frrNeighbor {
	f.t.Helper()
	ns, err := f.frr.neighbors()
	if err != nil {
		f.t.Fatal(err)
	}
	return ns
}

// noResets fails if a session of before was re-established or dropped.
func (f *fabric) noResets(before map[string]frrNeighbor, what string) {
	f.t.Helper()
	after := f.snapshotNeighbors()
	for addr, b := range before {
		a, ok := after[addr]
		// A dynamic neighbor that reset comes back as a new one with
		// fresh counters: its establishment time (FRR computes it from
		// the uptime in whole seconds, hence the second of slack) and its
		// message count tell.
		if !ok || a.EstablishedCnt != b.EstablishedCnt || a.DroppedCnt != b.DroppedCnt || a.State != "Established" ||
			b.EstablishedAt == 0 || a.EstablishedAt-b.EstablishedAt > 1 || a.MessageStats.TotalRecv < b.MessageStats.TotalRecv {
			f.t.Fatalf("%s reset the session with %s: before %+v, after %+v", what, addr, b, a)
		}
	}
}

func nodeAddrs(f *fabric, fam bgp.Family, names ...string) []string {
	var out []string
	for _, h := range f.lab.Nodes() {
		if len(names) > 0 && !slices.Contains(names, h.Name) {
			continue
		}
		if fam == bgp.IPv4 {
			out = append(out, h.Addr4.String())
		} else {
			out = append(out, h.Addr6.String())
		}
	}
	return out
}

// TestECMPEligibilityAndWithdraw: a Service's addresses appear at the
// router with one next hop per node in both families (IPv6 also over the
// IPv4 session, with the node's global IPv6 next hop, never a v4-mapped
// one); taking one node's eligibility away removes only its next hop and
// resets no session; deleting the Service withdraws the routes.
func TestECMPEligibilityAndWithdraw(t *testing.T) {
	f := newFabric(t, 3, "")
	f.in.Peers = []bgp.Peer{v4peer(), v6peer()}
	f.in.Services = []announce.Service{service("web", false, nil, "10.213.0.100", "fd00:213::100")}
	f.apply(nil)
	f.waitEstablished("tor-v4", "tor-v6")
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4)...)
	f.wantNextHops("fd00:213::100/128", nodeAddrs(f, bgp.IPv6)...)
	for _, p := range mustPaths(t, f.frr, "fd00:213::100/128") {
		for _, nh := range p.Nexthops {
			if strings.HasPrefix(nh.IP, "::ffff:") {
				t.Fatalf("v4-mapped next hop %s", nh.IP)
			}
		}
	}
	before := f.snapshotNeighbors()

	f.in.Nodes[1].Labels = map[string]string{bgp.LabelExcludeFromLB: ""}
	f.apply(nil)
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4, "node-1", "node-3")...)
	f.wantNextHops("fd00:213::100/128", nodeAddrs(f, bgp.IPv6, "node-1", "node-3")...)
	f.noResets(before, "excluding node-2")

	f.in.Services = nil
	f.apply(nil)
	f.wantNextHops("10.213.0.100/32")
	f.wantNextHops("fd00:213::100/128")
	f.noResets(before, "deleting the Service")
}

func mustPaths(t *testing.T, r *frrRouter, prefix string) []frrPath {
	t.Helper()
	ps, err := r.paths(prefix)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestChurnAndPeerChangesResetNothing: 100 Services created and deleted,
// a peer added and removed, reset none of the existing sessions (the
// router's established and dropped counters stay put), and every Service
// still reaches the router.
func TestChurnAndPeerChangesResetNothing(t *testing.T) {
	f := newFabric(t, 2, "")
	f.in.Peers = []bgp.Peer{v4peer()}
	f.apply(nil)
	f.waitEstablished("tor-v4")
	before := f.snapshotNeighbors()
	for i := range 100 {
		f.in.Services = append(f.in.Services, service(fmt.Sprintf("s%d", i), false, nil, fmt.Sprintf("10.213.0.%d", 96+i%31)))
		if i%2 == 1 {
			f.in.Services = slices.Delete(f.in.Services, 0, 1)
		}
		f.apply(nil)
	}
	last := f.in.Services[len(f.in.Services)-1].IngressIPs[0].String() + "/32"
	f.wantNextHops(last, nodeAddrs(f, bgp.IPv4)...)
	f.noResets(before, "100 Service changes")

	// Adding the IPv6 session and removing it again touches no other.
	f.in.Peers = []bgp.Peer{v4peer(), v6peer()}
	f.apply(nil)
	f.waitEstablished("tor-v6")
	f.noResets(before, "adding a peer")
	f.in.Peers = []bgp.Peer{v4peer()}
	f.apply(nil)
	f.noResets(before, "removing a peer")
	f.wantNextHops(last, nodeAddrs(f, bgp.IPv4)...)
	if os.Getenv("BGPSPEAKER_CHECK_THE_CHECK") != "" { // the check sees a real reset
		f.in.Peers = nil
		f.apply(nil)
		f.in.Peers = []bgp.Peer{v4peer()}
		f.apply(nil)
		f.waitEstablished("tor-v4")
		f.noResets(before, "deleting and re-adding the peer (must fail)")
	}
}
