//go:build linux

package conntrack_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	ct "github.com/ti-mo/conntrack"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/conntrack"
	"github.com/mooringlb/mooring/internal/netlab"
)

// Real entries from real traffic: inside a node namespace, nftables DNATs
// two Service addresses to an endpoint on a "dead" node (nobody answers:
// the SYN stays unanswered, the entry pinned) and one to another node's
// endpoint; Delete removes exactly the entries translated to the dead
// node for the addresses named, and a retransmitted connection attempt
// after it is translated afresh.
func TestDeleteRealEntries(t *testing.T) {
	lab := netlab.NewForTest(t, netlab.Config{Nodes: 1})
	h := lab.Host(netlab.NodeName(1))
	dead := netip.MustParseAddr("10.213.0.77") // no host: SYNs go unanswered
	live := netip.MustParseAddr("10.213.0.78") // another node's endpoint (also silent, so the entry stays)
	// Static neighbours: the SYNs leave (and are retransmitted) instead of
	// failing on an unresolved address.
	nl, err := h.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	eth0, err := nl.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for i, a := range []netip.Addr{dead, live} {
		mac := net.HardwareAddr{2, 0, 0, 0, 0, byte(0x77 + i)}
		if err := nl.NeighAdd(&netlink.Neigh{LinkIndex: eth0.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: a.AsSlice(), HardwareAddr: mac, Family: netlink.FAMILY_V4}); err != nil {
			t.Fatal(err)
		}
	}
	vip, vip2, other := "10.213.0.120", "10.213.0.121", "10.213.0.122"
	nft(t, h, `table ip lb {
  chain out {
    type nat hook output priority -100;
    ip daddr `+vip+` tcp dport 80 dnat to `+dead.String()+`:8080
    ip daddr `+vip2+` tcp dport 80 dnat to `+dead.String()+`:8080
    ip daddr `+other+` tcp dport 80 dnat to `+live.String()+`:8080
  }
}`)
	for _, dst := range []string{vip, vip2, other} {
		connect(t, h, dst)
	}
	entries := func() map[string]string { // original destination -> reply source
		out := map[string]string{}
		err := h.Do(func() error {
			c, err := ct.Dial(nil)
			if err != nil {
				return err
			}
			defer c.Close()
			flows, err := c.Dump(nil)
			for _, f := range flows {
				if f.TupleOrig.Proto.Protocol == unix.IPPROTO_TCP {
					out[f.TupleOrig.IP.DestinationAddress.String()] = f.TupleReply.IP.SourceAddress.String()
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(entries()) < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := entries(); got[vip] != dead.String() || got[vip2] != dead.String() || got[other] != live.String() {
		t.Fatalf("entries before = %v, want %s and %s DNATed to %s, %s to %s", got, vip, vip2, dead, other, live)
	}
	var n int
	err = h.Do(func() (err error) {
		n, err = conntrack.Delete(conntrack.Match{
			To:        []netip.Addr{netip.MustParseAddr(vip), netip.MustParseAddr(other)},
			Via:       []netip.Prefix{netip.PrefixFrom(dead, 32)},
			Unreplied: true, // as the agent asks: these SYNs were never answered
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := entries()
	if n != 1 || got[vip] != "" || got[vip2] != dead.String() || got[other] != live.String() {
		t.Fatalf("deleted %d, entries after = %v: want only %s's entry gone", n, got, vip)
	}
	// The kernel retransmits the SYN on the same socket: with the entry
	// gone it is tracked (and translated) anew.
	deadline = time.Now().Add(5 * time.Second)
	for entries()[vip] == "" && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	if entries()[vip] == "" {
		t.Error("the retransmitted SYN made no new entry")
	}
}

// The dead node's endpoints are not all inside its pod ranges: a pod of a
// second (multi-pool) block and a hostNetwork pod (the node's own address)
// answer from elsewhere. With their addresses in Via among hundreds of
// other prefixes (the set a cluster's Services and nodes give), Delete
// removes the unanswered entries to each of the three and keeps the live
// node's.
func TestDeleteByEndpointAddresses(t *testing.T) {
	lab := netlab.NewForTest(t, netlab.Config{Nodes: 1})
	h := lab.Host(netlab.NodeName(1))
	a := netip.MustParseAddr
	inRange, otherBlock, hostNet, live := a("10.213.0.70"), a("10.213.0.201"), a("10.213.0.12"), a("10.213.0.202")
	podRange := netip.MustParsePrefix("10.213.0.64/27")
	nl, err := h.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	eth0, err := nl.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	vips := map[netip.Addr]netip.Addr{ // Service address -> its endpoint
		a("10.213.0.130"): inRange, a("10.213.0.131"): otherBlock, a("10.213.0.132"): hostNet, a("10.213.0.133"): live,
	}
	rules := ""
	for i, ep := range []netip.Addr{inRange, otherBlock, hostNet, live} {
		if err := nl.NeighAdd(&netlink.Neigh{LinkIndex: eth0.Attrs().Index, State: netlink.NUD_PERMANENT,
			IP: ep.AsSlice(), HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 1, byte(i)}, Family: netlink.FAMILY_V4}); err != nil {
			t.Fatal(err)
		}
	}
	for vip, ep := range vips {
		rules += "    ip daddr " + vip.String() + " tcp dport 80 dnat to " + ep.String() + ":8080\n"
	}
	nft(t, h, "table ip lb {\n  chain out {\n    type nat hook output priority -100;\n"+rules+"  }\n}")
	for vip := range vips {
		connect(t, h, vip.String())
	}
	entries := func() map[netip.Addr]netip.Addr { // original destination -> reply source
		out := map[netip.Addr]netip.Addr{}
		err := h.Do(func() error {
			c, err := ct.Dial(nil)
			if err != nil {
				return err
			}
			defer c.Close()
			flows, err := c.Dump(nil)
			for _, f := range flows {
				if f.TupleOrig.Proto.Protocol == unix.IPPROTO_TCP {
					out[f.TupleOrig.IP.DestinationAddress] = f.TupleReply.IP.SourceAddress
				}
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	deadline := time.Now().Add(5 * time.Second)
	for len(entries()) < len(vips) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for vip, ep := range vips {
		if got := entries()[vip]; got != ep {
			t.Fatalf("entry for %s translated to %v, want %s", vip, got, ep)
		}
	}
	// The dead node's range and endpoint addresses among many others.
	via := []netip.Prefix{podRange, netip.PrefixFrom(otherBlock, 32), netip.PrefixFrom(hostNet, 32)}
	for i := range 300 {
		via = append(via, netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 99, byte(i / 250), byte(i % 250)}), 32))
	}
	via = append(via, netip.MustParsePrefix("10.244.0.0/24"), netip.MustParsePrefix("fd00:244::/64"), netip.MustParsePrefix("fd00:244::9/128"))
	var to []netip.Addr
	for vip := range vips {
		to = append(to, vip)
	}
	var n int
	err = h.Do(func() (err error) {
		n, err = conntrack.Delete(conntrack.Match{To: to, Via: via, Unreplied: true})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := entries()
	if n != 3 || got[a("10.213.0.133")] != live {
		t.Fatalf("deleted %d, entries after %v: want the three to the dead node's endpoints gone, the live one kept", n, got)
	}
	for vip, ep := range vips {
		if ep != live {
			if r, ok := got[vip]; ok && r == ep {
				t.Errorf("the entry %s -> %s survived", vip, ep)
			}
		}
	}
}

// connect starts a TCP connection to dst:80 from inside h and leaves it
// pending (its socket stays open until the test ends).
func connect(t *testing.T, h *netlab.Host, dst string) {
	t.Helper()
	err := h.Do(func() error {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		t.Cleanup(func() { unix.Close(fd) })
		sa := &unix.SockaddrInet4{Port: 80, Addr: netip.MustParseAddr(dst).As4()}
		if err := unix.Connect(fd, sa); err != nil && !errors.Is(err, unix.EINPROGRESS) {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("connecting to %s from %s: %v", dst, h.Name, err)
	}
}

func nft(t *testing.T, h *netlab.Host, script string) {
	t.Helper()
	if err := h.Nft(script); err != nil {
		t.Fatal(err)
	}
}
