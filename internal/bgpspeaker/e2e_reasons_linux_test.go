package bgpspeaker_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/bgpspeaker"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/netlab"
)

// wantReason waits until node's session with peer is not Established and
// gives reason, with a message containing each of msg.
func (f *fabric) wantReason(node, peer, reason string, msg ...string) bgpspeaker.SessionState {
	f.t.Helper()
	var got bgpspeaker.SessionState
	eventually(f.t, 30*time.Second, fmt.Sprintf("%s/%s reason %s %q", node, peer, reason, msg), func() (bool, string) {
		st, ok := f.speakers[node].session(peer)
		got = st
		for _, m := range msg {
			if !strings.Contains(st.Message, m) {
				return false, fmt.Sprintf("%+v", st)
			}
		}
		return ok && st.State != bgpspeaker.StateEstablished && st.Reason == reason, fmt.Sprintf("%+v", st)
	})
	f.t.Logf("%s/%s: %s: %s", node, peer, got.Reason, got.Message)
	return got
}

func quick(p bgp.Peer) bgp.Peer {
	p.ConnectTime = ptr(2 * time.Second)
	return p
}

func ptr[T any](v T) *T { return &v }

// TestPasswords: a wrong password never establishes and says
// AuthFailure; a password the router lacks says AuthFailure too; a
// missing Secret keeps the session closed (PasswordUnavailable, never
// unauthenticated); the right one establishes.
func TestPasswords(t *testing.T) {
	// The router wants a password from the IPv4 range; node-1's IPv6
	// address is an explicit neighbour without one.
	f := newFabric(t, 1, func(c *frr.Config) {
		c.Dynamic.Password = "s3cret"
		c.Neighbors = []frr.Neighbor{{Addr: netip.MustParseAddr("fd00:213::b"), Peer: frr.Peer{RemoteAS: "external", Passive: true}}}
	})
	v4, v6 := quick(v4peer()), quick(v6peer())
	v4.PasswordSecret, v6.PasswordSecret = "tor", "tor"
	f.in.Peers = []bgp.Peer{v4, v6}
	f.apply(map[string]bgpspeaker.Password{"tor": {Value: "wrong"}})
	f.wantReason("node-1", "tor-v4", bgpspeaker.ReasonAuthFailure) // the router drops the signature
	f.wantReason("node-1", "tor-v6", bgpspeaker.ReasonAuthFailure) // the router has no password

	f.apply(map[string]bgpspeaker.Password{"tor": {Unavailable: `Secret mooring-system/tor does not exist: create it with the key "password"`}})
	f.wantReason("node-1", "tor-v4", bgpspeaker.ReasonPasswordUnavailable, "never unauthenticated", "does not exist")
	f.apply(nil) // no Secret at all
	f.wantReason("node-1", "tor-v4", bgpspeaker.ReasonPasswordUnavailable)
	for a, ses := range f.snapshotNeighbors() {
		if ses.State == "Established" {
			t.Fatalf("a session with %s came up without its password: %+v", a, ses)
		}
	}

	// A key the kernel refuses (TCP-MD5 keys are at most 80 bytes): the
	// session stays closed rather than opening unauthenticated.
	f.apply(map[string]bgpspeaker.Password{"tor": {Value: strings.Repeat("k", 100)}})
	f.wantReason("node-1", "tor-v4", bgpspeaker.ReasonMD5Unsupported, "never unauthenticated")
	for a, ses := range f.snapshotNeighbors() {
		if ses.State == "Established" {
			t.Fatalf("a session with %s came up without TCP-MD5: %+v", a, ses)
		}
	}

	f.apply(map[string]bgpspeaker.Password{"tor": {Value: "s3cret"}})
	f.waitEstablished("tor-v4")
}

// TestASMismatch: the router's AS differs from peerASN (this node refuses
// it), the router refuses this node's AS, or a learned AS breaks
// dynamicASN: each says PeerASMismatch.
func TestASMismatch(t *testing.T) {
	// node-1's IPv6 address is an explicit neighbour expected in AS 65000.
	f := newFabric(t, 1, func(c *frr.Config) {
		c.Neighbors = []frr.Neighbor{{Addr: netip.MustParseAddr("fd00:213::b"), Peer: frr.Peer{RemoteAS: "65000", Passive: true}}}
	})
	v4, v6 := quick(v4peer()), quick(v6peer())
	v4.PeerASN = 64501
	f.in.Peers = []bgp.Peer{v4, v6}
	f.apply(nil)
	f.wantReason("node-1", "tor-v4", bgpspeaker.ReasonPeerASMismatch)
	f.wantReason("node-1", "tor-v6", bgpspeaker.ReasonPeerASMismatch, "refused this node's AS 64512")

	v4.PeerASN, v4.Dynamic = 0, bgp.DynamicInternal
	f.in.Peers = []bgp.Peer{v4}
	f.apply(nil)
	f.wantReason("node-1", "tor-v4", bgpspeaker.ReasonPeerASMismatch, "dynamicASN is internal")
	v4.Dynamic = bgp.DynamicExternal
	f.in.Peers = []bgp.Peer{v4}
	f.apply(nil)
	f.waitEstablished("tor-v4")
}

// TestBadPeers: a peer address nobody holds, one that refuses, and one
// that sends garbage each get a reason; the speaker never crashes and the
// healthy router's session and routes are never touched.
func TestBadPeers(t *testing.T) {
	f := newFabric(t, 1, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	junk, err := f.lab.AttachHost(ctx, "junk", 3, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = junk.Release() })
	startGarbage(t, junk)

	f.in.Peers = []bgp.Peer{v4peer()}
	f.in.Services = []*announce.Service{service("web", false, nil, "10.213.0.100")}
	f.apply(nil)
	f.waitEstablished("tor-v4")
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4)...)
	before := f.snapshotNeighbors()

	bad := func(name, addr string) bgp.Peer {
		return quick(bgp.Peer{Name: name, MyASN: nodeASN, PeerASN: 64999, Address: netip.MustParseAddr(addr)})
	}
	f.in.Peers = append(f.in.Peers, bad("silent", "10.213.0.5"), bad("refuses", f.lab.Client().Addr4.String()), bad("garbage", junk.Addr4.String()))
	f.apply(nil)
	f.wantReason("node-1", "silent", bgpspeaker.ReasonNoRoute)
	f.wantReason("node-1", "refuses", bgpspeaker.ReasonConnectRefused)
	f.wantReason("node-1", "garbage", bgpspeaker.ReasonInvalidMessage)
	time.Sleep(3 * time.Second) // a few more rounds of garbage
	f.noResets(before, "three bad peers")
	f.wantNextHops("10.213.0.100/32", nodeAddrs(f, bgp.IPv4)...)
	if st, ok := f.speakers["node-1"].session("tor-v4"); !ok || st.State != bgpspeaker.StateEstablished {
		t.Fatalf("healthy session %+v", st)
	}
}

// startGarbage runs a TCP server on port 179 in host that answers every
// connection with bytes that are not BGP.
func startGarbage(t *testing.T, host *netlab.Host) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), childEnv+"=garbage")
	p, err := host.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Kill(); _ = p.Wait() })
}

// garbageMain serves the garbage: a BGP marker with an impossible length,
// then random-looking bytes.
func garbageMain() int {
	l, err := net.Listen("tcp", ":179")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return 1
		}
		go func(c net.Conn) {
			defer c.Close()
			msg := append([]byte(strings.Repeat("\xff", 16)), 0x00, 0x05, 0x09)
			msg = append(msg, []byte("this is not BGP at all")...)
			_ = c.SetDeadline(time.Now().Add(10 * time.Second))
			_, _ = c.Write(msg)
			buf := make([]byte, 4096)
			for {
				if _, err := c.Read(buf); err != nil {
					return
				}
			}
		}(c)
	}
}
