package bgpspeaker_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/frr"
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
	frr      *frr.Instance
	speakers map[string]*speakerProc
	in       bgp.Input
}

// routerConfig is the router: eBGP with every node from listen ranges
// (each session may carry both families), 3/9 s timers, ECMP, graceful
// restart helper. mut changes it for a test.
func routerConfig(mut func(*frr.Config)) frr.Config {
	c := frr.Config{
		Hostname: "router", ASN: routerASN, RouterID: netip.MustParseAddr("10.213.0.1"),
		ListenRanges: []netip.Prefix{netip.MustParsePrefix("10.213.0.0/24"), netip.MustParsePrefix("fd00:213::/64")},
		Dynamic:      frr.Peer{RemoteAS: "external", Keepalive: 3 * time.Second, Hold: 9 * time.Second},
	}
	if mut != nil {
		mut(&c)
	}
	return c
}

// newFabric builds n nodes and the FRR router and starts a speaker per
// node; nothing is applied yet.
func newFabric(t *testing.T, n int, routerMut func(*frr.Config)) *fabric {
	frr.RequireFRR(t)
	return buildFabric(t, n, func(f *fabric) { f.frr = frr.StartForTest(t, f.router, routerConfig(routerMut)) })
}

// buildFabric builds n nodes and the router host (10.213.0.1,
// fd00:213::1), has startRouter start a router there, and starts a
// speaker per node.
func buildFabric(t *testing.T, n int, startRouter func(*fabric)) *fabric {
	netlab.RequirePrivileges(t)
	lab := netlab.NewForTest(t, netlab.Config{Nodes: n})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	host, err := lab.AttachHost(ctx, "router", 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = host.Release() })
	f := &fabric{t: t, lab: lab, router: host, speakers: map[string]*speakerProc{}}
	startRouter(f)
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

func service(name string, local bool, ready []string, ips ...string) *announce.Service {
	s := &announce.Service{Key: announce.ServiceKey{Namespace: "default", Name: name}, LocalTraffic: local, ReadyNodes: ready}
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
		got := f.nextHops(prefix)
		if slices.Equal(got, want) {
			return true, ""
		}
		table, _ := f.frr.Vtysh(context.Background(), "show bgp ipv4 unicast", "show bgp ipv6 unicast", "show bgp summary")
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

// paths returns the router's paths of prefix.
func (f *fabric) paths(prefix string) []frr.Path {
	ps, err := f.frr.BGPPrefix(context.Background(), netip.MustParsePrefix(prefix))
	if err != nil {
		f.t.Logf("reading %s: %v", prefix, err)
	}
	return ps
}

// nextHops lists the global next hops of prefix's valid paths, sorted,
// each once (a node may send a prefix on two sessions).
func (f *fabric) nextHops(prefix string) []string {
	var out []string
	for _, p := range f.paths(prefix) {
		if !p.Valid {
			continue
		}
		for _, nh := range p.Nexthops {
			if !nh.IsLinkLocalUnicast() {
				out = append(out, nh.String())
			}
		}
	}
	return slices.Compact(sortedStrings(out))
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}

// snapshotNeighbors records the router's sessions.
func (f *fabric) snapshotNeighbors() map[netip.Addr]frr.Session {
	f.t.Helper()
	ns, err := f.frr.Sessions(context.Background())
	if err != nil {
		f.t.Fatal(err)
	}
	return ns
}

// noResets fails if a session of before was re-established or dropped.
func (f *fabric) noResets(before map[netip.Addr]frr.Session, what string) {
	f.t.Helper()
	after := f.snapshotNeighbors()
	for addr, b := range before {
		a, ok := after[addr]
		// A dynamic neighbor that reset comes back as a new one with
		// fresh counters: its establishment time (FRR computes it from
		// the uptime in whole seconds, hence the second of slack) and its
		// message counts tell.
		if !ok || a.ConnectionsEstablished != b.ConnectionsEstablished || a.ConnectionsDropped != b.ConnectionsDropped ||
			a.State != "Established" || b.Established.IsZero() || a.Established.Sub(b.Established) > time.Second ||
			a.Messages.KeepalivesRecv < b.Messages.KeepalivesRecv {
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
	f := newFabric(t, 3, nil)
	f.in.Peers = []bgp.Peer{v4peer(), v6peer()}
	f.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100", "fd00:213::100")}
	f.apply(nil)
	f.waitEstablished("tor-v4", "tor-v6")
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4)...)
	f.wantNextHops("fd00:213::100/128", nodeAddrs(f, bgp.IPv6)...)
	for _, p := range f.paths("fd00:213::100/128") {
		for _, nh := range p.Nexthops {
			if nh.Is4In6() {
				t.Fatalf("v4-mapped next hop %s", nh)
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

// TestChurnAndPeerChangesResetNothing: 100 Services created and deleted,
// a peer added and removed, reset none of the existing sessions (the
// router's established and dropped counters stay put), and every Service
// still reaches the router.
func TestChurnAndPeerChangesResetNothing(t *testing.T) {
	f := newFabric(t, 2, nil)
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
