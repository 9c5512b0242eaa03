//go:build linux

package conntrack_test

import (
	"errors"
	"net"
	"net/netip"
	"os/exec"
	"strings"
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
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := h.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Wait(); err != nil {
		t.Fatalf("nft in %s: %v: %s", h.Name, err, out.String())
	}
}
