package podipamctl_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"slices"
	"testing"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mooringlb/mooring/internal/podipam"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

// TestApplyRoutesInANamespace installs, changes and removes Mooring's pod
// routes in a fresh network namespace and leaves other routes alone.
func TestApplyRoutesInANamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("needs root, and CI runs as root")
		}
		t.Skip("needs root: network namespaces")
	}
	h, done := freshNamespace(t)
	defer done()
	link := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "seg0"}, PeerName: "seg1"}
	must(t, h.LinkAdd(link))
	peer, err := h.LinkByName("seg1")
	must(t, err)
	must(t, h.LinkSetUp(peer))
	must(t, h.AddrAdd(link, mustAddr("192.0.2.10/24")))
	must(t, h.AddrAdd(link, &netlink.Addr{IPNet: mustAddr("2001:db8::10/64").IPNet, Flags: 0x80 /* nodad */}))
	must(t, h.LinkSetUp(link))
	other := &netlink.Route{Dst: mustAddr("10.9.0.0/24").IPNet, Gw: net.ParseIP("192.0.2.3"), Protocol: netlink.RouteProtocol(4)}
	must(t, h.RouteAdd(other))

	r := func(dst, via string) podipam.Route {
		return podipam.Route{Dst: netip.MustParsePrefix(dst), Via: netip.MustParseAddr(via)}
	}
	steps := [][]podipam.Route{
		{r("10.244.1.0/24", "192.0.2.2"), r("fd00::100/120", "2001:db8::2")},
		{r("10.244.1.0/24", "192.0.2.3")}, // moved and one gone
		nil,                               // every block released
	}
	for i, want := range steps {
		if err := podipamctl.ApplyRoutes(h, want); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		got := routesOf(t, h, podipamctl.RouteProtocol)
		var ws []string
		for _, w := range want {
			ws = append(ws, fmt.Sprintf("%s via %s", w.Dst, w.Via))
		}
		slices.Sort(ws)
		if fmt.Sprint(got) != fmt.Sprint(ws) {
			t.Fatalf("step %d: routes %v, want %v", i, got, ws)
		}
		if o := routesOf(t, h, 4); len(o) != 1 {
			t.Fatalf("step %d: the unrelated route was touched: %v", i, o)
		}
	}
}

func routesOf(t *testing.T, h *netlink.Handle, proto netlink.RouteProtocol) []string {
	t.Helper()
	rs, err := h.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Protocol: proto}, netlink.RT_FILTER_PROTOCOL)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rs {
		if r.Dst != nil && r.Gw != nil {
			out = append(out, fmt.Sprintf("%s via %s", r.Dst, r.Gw))
		}
	}
	slices.Sort(out)
	return out
}

// freshNamespace creates an unnamed network namespace and a netlink handle
// in it; the host's namespace is never touched.
func freshNamespace(t *testing.T) (*netlink.Handle, func()) {
	t.Helper()
	type res struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan res)
	go func() {
		runtime.LockOSThread() // the thread dies with the goroutine, namespace and all
		ns, err := netns.New()
		ch <- res{ns, err}
	}()
	got := <-ch
	if got.err != nil {
		t.Fatal(got.err)
	}
	h, err := netlink.NewHandleAt(got.ns)
	if err != nil {
		t.Fatal(err)
	}
	return h, func() { h.Close(); got.ns.Close() }
}

func mustAddr(s string) *netlink.Addr {
	a, err := netlink.ParseAddr(s)
	if err != nil {
		panic(err)
	}
	return a
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
