//go:build linux

package agent_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/vishvananda/netlink"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/mooringlb/mooring/internal/netlab"
)

// The failover client runs as its own process inside the client namespace
// (the test binary re-executed), so its connects are ordinary sockets of
// that namespace and never queue behind other work on a namespace worker
// thread. It starts a TCP connection to the VIP every interval (each with a
// 200 ms timeout, overlapping) and prints one line per attempt:
// "<start unix ns> ok <node>" or "<start unix ns> fail <error>".

const helperEnv = "MOORING_E2E_HELPER"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "tcp-client" {
		os.Exit(tcpClientMain(os.Getenv("TARGET"), os.Getenv("INTERVAL"), os.Getenv("FLUSH") != ""))
	}
	// envtest logs through controller-runtime; the agents' own logs are in
	// their files.
	ctrllog.SetLogger(logr.Discard())
	os.Exit(m.Run())
}

func tcpClientMain(target, interval string, flush bool) int {
	every, err := time.ParseDuration(interval)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ap, err := netip.ParseAddrPort(target)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	tick := time.NewTicker(every)
	for range tick.C { // ends when the test kills the process
		start := time.Now()
		go func() {
			line := "ok "
			if flush {
				forgetNeighbour(ap.Addr())
			}
			conn, err := net.DialTimeout("tcp", target, 200*time.Millisecond)
			if err == nil {
				_ = conn.SetDeadline(time.Now().Add(200 * time.Millisecond))
				b, rerr := io.ReadAll(conn)
				conn.Close()
				line += strings.TrimSpace(string(b))
				err = rerr
			}
			if err != nil {
				line = "fail " + strings.ReplaceAll(err.Error(), " ", "_")
			}
			mu.Lock()
			fmt.Fprintf(out, "%d %s\n", start.UnixNano(), line)
			out.Flush()
			mu.Unlock()
		}()
	}
	return 0
}

// forgetNeighbour deletes the client's neighbour entry for addr, so that
// the next connection resolves it afresh: a client arriving in a hand-off
// gap, when nobody answers ARP/NDP, fails (the kernel retries after 1 s).
// A resolution in progress (INCOMPLETE) is left alone: deleting it would
// fail the attempt waiting on it with "no route to host", which says
// nothing about who answers.
func forgetNeighbour(addr netip.Addr) {
	fam := netlink.FAMILY_V4
	if addr.Is6() {
		fam = netlink.FAMILY_V6
	}
	ns, err := netlink.NeighList(0, fam)
	if err != nil {
		return
	}
	for _, n := range ns {
		if a, ok := netip.AddrFromSlice(n.IP); ok && a.Unmap() == addr && n.State&netlink.NUD_INCOMPLETE == 0 {
			_ = netlink.NeighDel(&n)
		}
	}
}

type attempt struct {
	at   time.Time
	ok   bool
	node string // the node that answered, or why it failed
}

// timeline collects a client process's attempts.
type timeline struct {
	mu       sync.Mutex
	attempts []attempt
}

func (tl *timeline) snapshot() []attempt {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return append([]attempt(nil), tl.attempts...)
}

// startClient runs the failover client against addr:8080 in the client
// namespace.
func (c *cluster) startClient(addr netip.Addr, every time.Duration) *timeline {
	c.t.Helper()
	return c.startClientFlushing(addr, every, false)
}

// startClientFlushing is startClient whose client, with flush, forgets its
// neighbour entry for addr before every connection.
func (c *cluster) startClientFlushing(addr netip.Addr, every time.Duration, flush bool) *timeline {
	c.t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=tcp-client",
		"TARGET="+netip.AddrPortFrom(addr, 8080).String(), "INTERVAL="+every.String())
	if flush {
		cmd.Env = append(cmd.Env, "FLUSH=1")
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	p, err := c.lab.Client().Start(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	tl := &timeline{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) < 2 {
				continue
			}
			ns, _ := strconv.ParseInt(f[0], 10, 64)
			a := attempt{at: time.Unix(0, ns), ok: f[1] == "ok"}
			if len(f) > 2 {
				a.node = f[2]
			}
			tl.mu.Lock()
			tl.attempts = append(tl.attempts, a)
			tl.mu.Unlock()
		}
	}()
	c.t.Cleanup(func() { _ = p.Kill(); _ = p.Wait(); <-done })
	return tl
}

// waitServedBy waits until the last few attempts all succeeded from node.
func (tl *timeline) waitServedBy(t *testing.T, node string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		as := tl.snapshot()
		if n := len(as); n >= 5 && allServedBy(as[n-5:], node) {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	as := tl.snapshot()
	t.Fatalf("client not served by %s within %v; last attempts %+v", node, within, as[max(0, len(as)-5):])
}

func allServedBy(as []attempt, node string) bool {
	for _, a := range as {
		if !a.ok || a.node != node {
			return false
		}
	}
	return true
}

// outageAfter is the time from kill until the first attempt started after
// it that succeeded, and the node that served it. Attempts are started
// every interval regardless of earlier ones, so this is the client-observed
// outage with the interval as resolution.
func (tl *timeline) outageAfter(kill time.Time, within time.Duration) (time.Duration, string, bool) {
	deadline := time.Now().Add(within)
	for {
		for _, a := range tl.snapshot() {
			if a.ok && a.at.After(kill) {
				// A success started right after the kill may still have
				// reached the old node before its link went down; the
				// caller checks the node.
				return a.at.Sub(kill), a.node, true
			}
		}
		if time.Now().After(deadline) {
			return 0, "", false
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// serveVIP puts addr on lo of every node (arp_ignore=1 and arp_announce=2
// are set lab-wide, so no kernel answers ARP for it by itself) and runs a
// TCP server on addr:8080 in each node namespace that answers with the
// node's name: whichever node receives the client's frames answers, so the
// client sees which node the L2 announcement sends it to.
func (c *cluster) serveVIP(addr netip.Addr) {
	c.t.Helper()
	for _, n := range c.lab.Nodes() {
		if err := n.AddAddr("lo", netip.PrefixFrom(addr, addr.BitLen())); err != nil {
			c.t.Fatal(err)
		}
		var ln net.Listener
		if err := n.Do(func() (err error) {
			ln, err = net.Listen("tcp", netip.AddrPortFrom(addr, 8080).String())
			return err
		}); err != nil {
			c.t.Fatal(err)
		}
		name := n.Name
		ctx, cancel := context.WithCancel(c.ctx)
		var wg sync.WaitGroup
		c.t.Cleanup(func() { cancel(); ln.Close(); wg.Wait() })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				_, _ = conn.Write([]byte(name + "\n"))
				conn.Close()
			}
		}()
	}
}

// killNode is a hard node loss: SIGKILL to the agent and the node's cable
// pulled (eth0 down, so the bridge port loses carrier too).
func (c *cluster) killNode(h *netlab.Host) time.Time {
	c.t.Helper()
	p := c.agents[h.Name]
	if err := h.SetLinkDown("eth0"); err != nil {
		c.t.Fatal(err)
	}
	kill := time.Now()
	if err := p.Kill(); err != nil {
		c.t.Fatal(err)
	}
	return kill
}
