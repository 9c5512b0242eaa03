package bgpagent_test

import (
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/vishvananda/netlink"

	"github.com/mooringlb/mooring/internal/netlab"
)

// The backend tests run a real API server, a real speaker and a real GoBGP
// router in one process. BGP peer addresses must be real unicast addresses
// (admission refuses loopback), so the test re-runs itself in a network
// namespace of its own — every thread of the child in it — with 198.18.0.2
// (the node) and 198.18.0.3 (the router) on a veth pair whose two ends
// stay in it, and a default route (kube-apiserver wants one to pick its
// advertised address). Nothing leaves the namespace.

const inNetnsEnv = "MOORING_BGPAGENT_IN_NETNS"

var (
	nodeAddr   = netip.MustParseAddr("198.18.0.2")
	routerAddr = netip.MustParseAddr("198.18.0.3")
)

// inOwnNetns returns true in the child, after setting its lo up. In the
// parent it runs the child for t's test and returns false.
func inOwnNetns(t *testing.T) bool {
	t.Helper()
	if os.Getenv(inNetnsEnv) == "1" {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkSetUp(lo); err != nil {
			t.Fatal(err)
		}
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "node"}, PeerName: "router"}); err != nil {
			t.Fatal(err)
		}
		for name, a := range map[string]netip.Addr{"node": nodeAddr, "router": routerAddr} {
			l, err := netlink.LinkByName(name)
			if err != nil {
				t.Fatal(err)
			}
			if err := netlink.AddrAdd(l, &netlink.Addr{IPNet: netlink.NewIPNet(a.AsSlice())}); err != nil {
				t.Fatal(err)
			}
			if err := netlink.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
			if name == "node" {
				def := netlink.NewIPNet(netip.IPv4Unspecified().AsSlice())
				def.Mask = net.CIDRMask(0, 32)
				if err := netlink.RouteAdd(&netlink.Route{LinkIndex: l.Attrs().Index, Scope: netlink.SCOPE_LINK, Dst: def}); err != nil {
					t.Fatal(err)
				}
			}
		}
		return true
	}
	netlab.RequirePrivileges(t)
	cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), inNetnsEnv+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
		t.Fatalf("%s in its own network namespace: %v\n%s", t.Name(), err, out)
	}
	return false
}
