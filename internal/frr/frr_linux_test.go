package frr

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/mooringlb/mooring/internal/netlab"
)

var (
	vip4 = netip.MustParsePrefix("10.213.0.100/32")
	vip6 = netip.MustParsePrefix("fd00:213::100/128")
)

// eventually polls fn every 100 ms until it returns nil or d passes.
func eventually(t *testing.T, d time.Duration, what string, fn func() error) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		err := fn()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s: %v", what, d, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestRouterLearnsECMPRoutesAndBFDWithdrawsADeadPeer runs a router with a
// listen range on node-1 (sending its peers nothing) and two real FRR speakers on node-2 (an IPv4
// session) and node-3 (an IPv6 session), both originating the same two
// prefixes: the router must install one ECMP route per family with both
// next hops into its namespace's kernel table, show both sessions and BFD
// peers, and — the hold time being 30 s — drop node-2's next hop through
// BFD alone within a few seconds of node-2's daemons being SIGKILLed.
func TestRouterLearnsECMPRoutesAndBFDWithdrawsADeadPeer(t *testing.T) {
	RequireFRR(t)
	l := netlab.NewForTest(t, netlab.Config{Nodes: 3})
	n1, n2, n3 := l.Nodes()[0], l.Nodes()[1], l.Nodes()[2]
	bfd := &BFD{Interval: 300 * time.Millisecond, Multiplier: 3}
	router := StartForTest(t, n1, Config{
		Hostname: "router", ASN: 64500, RouterID: n1.Addr4,
		ListenRanges: []netip.Prefix{l.Config().Subnet4, l.Config().Subnet6},
		Dynamic: Peer{RemoteAS: "external", BFD: bfd, Keepalive: 10 * time.Second, Hold: 30 * time.Second,
			SendNone: true},
		MaximumPaths: 8,
	})
	speaker := func(h *netlab.Host, asn uint32, peer netip.Addr) *Instance {
		return StartForTest(t, h, Config{
			Hostname: h.Name, ASN: asn, RouterID: h.Addr4,
			Neighbors: []Neighbor{{Addr: peer, Peer: Peer{RemoteAS: "64500", BFD: bfd,
				Keepalive: 10 * time.Second, Hold: 30 * time.Second, ConnectRetry: time.Second}}},
			Originate: []netip.Prefix{vip4, vip6},
		})
	}
	s2 := speaker(n2, 64502, n1.Addr4)
	speaker(n3, 64503, n1.Addr6)
	ctx := context.Background()

	waitSessions(t, router, map[netip.Addr]uint32{n2.Addr4: 64502, n3.Addr6: 64503})
	eventually(t, 10*time.Second, "ECMP routes in zebra", func() error {
		rib, err := router.RIB(ctx, IPv4)
		if err != nil {
			return err
		}
		if got, want := rib.Installed(vip4, "bgp"), []netip.Addr{n2.Addr4, n3.Addr4}; !slices.Equal(got, want) {
			return fmt.Errorf("%s next hops %v, want %v", vip4, got, want)
		}
		rib6, err := router.RIB(ctx, IPv6)
		if err != nil {
			return err
		}
		if got := rib6.Installed(vip6, "bgp"); len(got) != 2 {
			return fmt.Errorf("%s next hops %v, want 2", vip6, got)
		}
		return nil
	})
	if got := kernelNexthops(t, n1, vip4); !slices.Equal(got, []netip.Addr{n2.Addr4, n3.Addr4}) {
		t.Fatalf("kernel route %s via %v, want both speakers", vip4, got)
	}
	paths, err := router.BGPPrefix(ctx, vip4)
	if err != nil || len(paths) != 2 || !slices.ContainsFunc(paths, func(p Path) bool { return p.Best }) {
		t.Fatalf("BGP paths of %s: %+v, %v", vip4, paths, err)
	}
	checkBFDPeers(t, router, 2)
	// SendNone: the router keeps both speakers' routes to itself. Without
	// it the best path, learned from one speaker, goes to the other.
	time.Sleep(time.Second) // FRR advertises within ~50 ms of its best-path run
	ss, err := router.Sessions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for addr, s := range ss {
		if s.SentPrefixes[IPv4]+s.SentPrefixes[IPv6] != 0 {
			t.Errorf("the router sent %v prefixes to %s, want none (SendNone)", s.SentPrefixes, addr)
		}
	}

	// Node-2 dies as a machine losing power does: its link goes first, so
	// its kernel sends no FIN or RST for the sessions of the daemons killed
	// after. Only BFD can tell in < 30 s.
	killed := time.Now()
	if err := n2.SetLinkDown("eth0"); err != nil {
		t.Fatal(err)
	}
	if err := s2.Kill(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 5*time.Second, "node-2's next hop withdrawn", func() error {
		rib, err := router.RIB(ctx, IPv4)
		if err != nil {
			return err
		}
		if got := rib.Installed(vip4, "bgp"); !slices.Equal(got, []netip.Addr{n3.Addr4}) {
			return fmt.Errorf("%s next hops %v", vip4, got)
		}
		return nil
	})
	t.Logf("node-2's next hop left the router's table %s after the kill", time.Since(killed).Round(time.Millisecond))
	if got := kernelNexthops(t, n1, vip4); !slices.Equal(got, []netip.Addr{n3.Addr4}) {
		t.Fatalf("kernel route %s via %v after the kill, want node-3 only", vip4, got)
	}
}

// waitSessions waits until router has an established dynamic session from
// each address with its AS number, 30 s hold time, BFD up and one accepted
// prefix per family.
func waitSessions(t *testing.T, router *Instance, want map[netip.Addr]uint32) {
	t.Helper()
	ctx := context.Background()
	eventually(t, 20*time.Second, "sessions established", func() error {
		ss, err := router.Sessions(ctx)
		if err != nil {
			return err
		}
		for addr, asn := range want {
			s, ok := ss[addr]
			if !ok || s.State != "Established" || s.RemoteAS != asn || !s.Dynamic || s.Uptime <= 0 ||
				s.AcceptedPrefixes[IPv4] != 1 || s.AcceptedPrefixes[IPv6] != 1 || s.HoldTime != 30*time.Second ||
				s.Messages.UpdatesRecv == 0 || s.ConnectionsEstablished != 1 || s.BFDStatus != "Up" {
				return fmt.Errorf("session %s: %+v", addr, s)
			}
		}
		return nil
	})
}

// checkBFDPeers checks that router has n BFD sessions, all up at 300 ms × 3.
func checkBFDPeers(t *testing.T, router *Instance, n int) {
	t.Helper()
	peers, err := router.BFDPeers(context.Background())
	if err != nil || len(peers) != n {
		t.Fatalf("BFD peers %+v, %v, want %d", peers, err, n)
	}
	for _, p := range peers {
		if p.Status != "up" || p.ReceiveInterval != 300*time.Millisecond || p.DetectMultiplier != 3 ||
			p.RemoteTransmit != 300*time.Millisecond {
			t.Fatalf("BFD peer %+v, want up at 300ms × 3", p)
		}
	}
}

// kernelNexthops returns the gateways of p's route in h's main table.
func kernelNexthops(t *testing.T, h *netlab.Host, p netip.Prefix) []netip.Addr {
	t.Helper()
	nl, err := h.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	family := netlink.FAMILY_V4
	if p.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	routes, err := nl.RouteListFiltered(family, &netlink.Route{Dst: prefixNet(p)}, netlink.RT_FILTER_DST)
	if err != nil {
		t.Fatal(err)
	}
	var out []netip.Addr
	for _, r := range routes {
		if r.Gw != nil {
			a, _ := netip.AddrFromSlice(r.Gw)
			out = append(out, a.Unmap())
		}
		for _, nh := range r.MultiPath {
			a, _ := netip.AddrFromSlice(nh.Gw)
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// TestStopLeavesNothingBehind checks that Stop ends every daemon and
// removes the folder and FRR's per-process folders, and that a second
// router beside it keeps running meanwhile.
func TestStopLeavesNothingBehind(t *testing.T) {
	RequireFRR(t)
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	n1, n2 := l.Nodes()[0], l.Nodes()[1]
	other := StartForTest(t, n2, Config{ASN: 64501, RouterID: n2.Addr4})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Start(ctx, n1, "", Config{ASN: 64500, RouterID: n1.Addr4,
		ListenRanges: []netip.Prefix{l.Config().Subnet4}, Dynamic: Peer{RemoteAS: "external"}})
	if err != nil {
		t.Fatal(err)
	}
	dir := r.Dir
	pids := map[string]int{}
	for d, p := range r.procs {
		pids[d] = p.PID
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("%s still there after Stop: %v", dir, err)
	}
	for d, pid := range pids {
		if _, err := os.Stat(filepath.Join("/proc", strconv.Itoa(pid))); err == nil {
			t.Errorf("%s (pid %d) still running after Stop", d, pid)
		}
		if _, err := os.Stat(filepath.Join(frrTmp, d+"."+strconv.Itoa(pid))); err == nil {
			t.Errorf("%s/%s.%d left behind", frrTmp, d, pid)
		}
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := other.Sessions(ctx); err != nil {
		t.Fatalf("the other router stopped answering: %v", err)
	}
}

func prefixNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// TestRealFRRAcceptsEveryRenderedSetting starts FRR with a configuration
// using every field, and checks that Start reports a line FRR refuses
// (FRR itself only logs it and runs on without it).
func TestRealFRRAcceptsEveryRenderedSetting(t *testing.T) {
	RequireFRR(t)
	l := netlab.NewForTest(t, netlab.Config{Nodes: 1})
	n := l.Nodes()[0]
	cfg := validConfig()
	cfg.Port = 1179
	r := StartForTest(t, n, cfg)
	out, err := r.Vtysh(context.Background(), "show running-config")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"neighbor dynamic password s3cret", "bgp listen range fd00:213::/64 peer-group dynamic",
		"neighbor 10.214.0.2 ebgp-multihop 2", "bgp graceful-restart stalepath-time 30", "profile t300x3"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("running config lacks %q", want)
		}
	}

	cfg.Extra = []string{"neighbor 10.214.0.2 no-such-setting"}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r2, err := Start(ctx, n, "", cfg)
	if err == nil {
		r2.Stop()
		t.Fatal("Start accepted a configuration line FRR refuses")
	}
	if !strings.Contains(err.Error(), "no-such-setting") {
		t.Fatalf("Start's error does not name the refused line: %v", err)
	}
}
