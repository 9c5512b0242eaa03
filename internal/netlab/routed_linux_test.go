package netlab

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestAttachBehindRoutesThroughTheHostInFront builds a lab without a
// bridge client, a router on the bridge and a client behind it: the client
// reaches a node only through the router (its only link is the router's),
// and not at all once the router stops forwarding.
func TestAttachBehindRoutesThroughTheHostInFront(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 2, NoClient: true})
	ctx := testCtx(t)
	if l.Client() != nil || len(l.Nodes()) != 2 || l.Host(ClientName) != nil {
		t.Fatalf("NoClient lab: Client() = %v, %d nodes", l.Client(), len(l.Nodes()))
	}
	fwd := map[string]string{"net.ipv4.ip_forward": "1", "net.ipv6.conf.all.forwarding": "1"}
	router, err := l.AttachHost(ctx, "router", 1, fwd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { router.Release() })
	sub4, sub6 := netip.MustParsePrefix("10.214.0.0/24"), netip.MustParsePrefix("fd00:214::/64")
	c, err := l.AttachBehind(ctx, "client", router, sub4, sub6, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Release() })
	if c.Addr4 != netip.MustParseAddr("10.214.0.250") || c.Addr6 != netip.MustParseAddr("fd00:214::fa") {
		t.Fatalf("client addresses %s %s", c.Addr4, c.Addr6)
	}
	if _, err := l.AttachBehind(ctx, "client", router, sub4, sub6, nil); err == nil {
		// The name is the router's link now: a second one would clash.
		t.Error("AttachBehind accepted a second host of the same name behind the same router")
	}
	if _, err := l.AttachBehind(ctx, "c2", router, netip.MustParsePrefix("10.215.0.0/25"), sub6, nil); err == nil {
		t.Error("AttachBehind accepted a /25")
	}
	n := l.Nodes()[0]
	for _, gw := range []netip.Addr{netip.MustParseAddr("10.214.0.1"), netip.MustParseAddr("fd00:214::1")} {
		if err := Ping(ctx, c, gw); err != nil {
			t.Fatalf("client → router %s: %v", gw, err)
		}
	}
	// The node needs a way back, as on a routed fabric.
	for _, p := range []netip.Prefix{sub4, sub6} {
		gw := router.Addr4
		if p.Addr().Is6() {
			gw = router.Addr6
		}
		if err := addRoute(n, p, gw); err != nil {
			t.Fatal(err)
		}
	}
	for _, a := range []netip.Addr{n.Addr4, n.Addr6} {
		if err := Ping(ctx, c, a); err != nil {
			t.Fatalf("client → %s through the router: %v", a, err)
		}
	}
	if err := router.Sysctl("net.ipv4.ip_forward", "0"); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := Ping(short, c, n.Addr4); err == nil {
		t.Fatal("the client reached a node with the router not forwarding: it has another way")
	}
}

// addRoute routes p via gw in h.
func addRoute(h *Host, p netip.Prefix, gw netip.Addr) error {
	nl, err := h.NetlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	return nl.RouteReplace(&netlink.Route{Dst: nlAddr(p).IPNet, Gw: gw.AsSlice()})
}
