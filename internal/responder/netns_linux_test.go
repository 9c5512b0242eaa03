//go:build linux

package responder

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/ethernet"
	"github.com/mdlayher/ndp"
	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"

	"github.com/mooringlb/mooring/internal/netlab"
)

// These tests run each responder the way the agent runs: as its own process
// wholly inside a node's network namespace (the test binary re-executed with
// childEnv set, started by netlab on the namespace's worker thread). The
// child applies each JSON table it reads on stdin and exits at EOF.

const childEnv = "MOORING_RESPONDER_TEST_CHILD"

// Lab addresses: offsets 100-199 are netlab's pool range.
var (
	labVIP4   = netip.MustParseAddr("10.213.0.150")
	labVIP6   = netip.MustParseAddr("fd00:213::96")
	labOther4 = netip.MustParseAddr("10.213.0.151")
	labOther6 = netip.MustParseAddr("fd00:213::97")
	labNobody = []netip.Addr{netip.MustParseAddr("10.213.0.152"), netip.MustParseAddr("fd00:213::98")}
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

func childMain() int {
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	m := New(Config{GratuitousInterval: 50 * time.Millisecond}, log, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var raw map[string][]netip.Addr
		if err := json.Unmarshal(in.Bytes(), &raw); err != nil {
			log.Error("bad table", "err", err)
			return 2
		}
		table := map[int][]netip.Addr{}
		for k, v := range raw {
			i, _ := strconv.Atoi(k)
			table[i] = v
		}
		m.Apply(table)
		log.Info("applied", "table", raw)
	}
	cancel()
	if err := <-done; err != nil {
		log.Error("run", "err", err)
		return 1
	}
	return 0
}

// child is a responder process in a node's namespace.
type child struct {
	host  *netlab.Host
	proc  *netlab.Process
	stdin interface {
		Write([]byte) (int, error)
		Close() error
	}
	stderr *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func startChild(t *testing.T, h *netlab.Host) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	c := &child{host: h, stdin: stdin, stderr: &syncBuffer{}}
	cmd.Stderr = c.stderr
	if c.proc, err = h.Start(cmd); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.proc.Kill()
		if t.Failed() {
			t.Logf("%s responder log:\n%s", h.Name, c.stderr.String())
		}
	})
	return c
}

// apply sends the table for the child's eth0.
func (c *child) apply(t *testing.T, addrs ...netip.Addr) {
	t.Helper()
	b, _ := json.Marshal(map[string][]netip.Addr{strconv.Itoa(c.host.IfIndex): addrs})
	if _, err := c.stdin.Write(append(b, '\n')); err != nil {
		t.Fatalf("%s: applying table: %v", c.host.Name, err)
	}
}

// awaitOwners probes from the client until the answers equal want (at most
// 5 s, since the child first has to start and open its sockets).
func awaitOwners(t *testing.T, l *netlab.Lab, addr netip.Addr, want ...net.HardwareAddr) {
	t.Helper()
	var got []net.HardwareAddr
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		var err error
		got, err = netlab.Probe(context.Background(), l.Client(), addr, 150*time.Millisecond)
		if err != nil {
			t.Fatalf("probing %s: %v", addr, err)
		}
		if slices.EqualFunc(got, want, func(a, b net.HardwareAddr) bool { return bytes.Equal(a, b) }) {
			return
		}
	}
	t.Fatalf("responders for %s: %v, want %v", addr, got, want)
}

func TestResponderInNamespaces(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	n1, n2 := l.Nodes()[0], l.Nodes()[1]
	r1, r2 := startChild(t, n1), startChild(t, n2)
	r1.apply(t, labVIP4, labVIP6)
	r2.apply(t, labOther4, labOther6)

	for _, a := range []netip.Addr{labVIP4, labVIP6} {
		awaitOwners(t, l, a, n1.MAC)
	}
	for _, a := range []netip.Addr{labOther4, labOther6} {
		awaitOwners(t, l, a, n2.MAC)
	}
	for _, a := range labNobody {
		got, err := netlab.Probe(context.Background(), l.Client(), a, 200*time.Millisecond)
		if err != nil || len(got) != 0 {
			t.Errorf("address in no table %s: answered by %v (%v)", a, got, err)
		}
	}

	t.Run("unicast NUD probe", func(t *testing.T) {
		got := nudProbe(t, l.Client(), n1.MAC, labVIP6)
		if !bytes.Equal(got, n1.MAC) {
			t.Fatalf("unicast NS for %s to %s: answered by %v", labVIP6, n1.MAC, got)
		}
		// The same probe sent to the node that does not own it stays unanswered.
		if got := nudProbe(t, l.Client(), n2.MAC, labVIP6); got != nil {
			t.Fatalf("unicast NS for %s to node-2: answered by %v", labVIP6, got)
		}
	})

	t.Run("solicited-node group joined", func(t *testing.T) {
		// /proc/PID/net follows that process's namespace: the child's view
		// of eth0's link-layer multicast list.
		group, _ := SolicitedNodeMAC(labVIP6)
		want := fmt.Sprintf("%x", []byte(group))
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/net/dev_mcast", r1.proc.PID))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(want)) {
			t.Fatalf("node-1's eth0 multicast list lacks %s:\n%s", group, b)
		}
	})
}

// nudProbe sends, from the client, a neighbour solicitation unicast to
// target at ownerMAC (as the kernel does to confirm a STALE entry) and
// returns the MAC of the solicited advertisement that comes back, or nil.
func nudProbe(t *testing.T, client *netlab.Host, ownerMAC net.HardwareAddr, target netip.Addr) net.HardwareAddr {
	t.Helper()
	ifi, err := client.Interface()
	if err != nil {
		t.Fatal(err)
	}
	var conn *packet.Conn
	if err := client.Do(func() error {
		var err error
		conn, err = packet.Listen(ifi, packet.Raw, unix.ETH_P_IPV6, nil)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	frame := nsFrame(ifi.HardwareAddr, client.Addr6, target, target, ownerMAC, false)
	if _, err := conn.WriteTo(frame, &packet.Addr{HardwareAddr: ownerMAC}); err != nil {
		t.Fatal(err)
	}
	_ = conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
	buf := make([]byte, 2048)
	for {
		n, _, err := conn.ReadFrom(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil
		}
		if err != nil {
			t.Fatal(err)
		}
		var f ethernet.Frame
		if f.UnmarshalBinary(buf[:n]) != nil || !bytes.Equal(f.Destination, ifi.HardwareAddr) {
			continue
		}
		src, dst, body, ok := parseICMPv6(f.Payload)
		if !ok || dst != client.Addr6 || src != target {
			continue
		}
		if m, err := ndp.ParseMessage(body); err == nil {
			if na, ok := m.(*ndp.NeighborAdvertisement); ok && na.TargetAddress == target && na.Solicited {
				return slices.Clone(f.Source)
			}
		}
	}
}

// touch makes the client's kernel resolve addr by sending it one UDP
// datagram (discard port) from inside the client's namespace.
func touch(t *testing.T, client *netlab.Host, addr netip.Addr) {
	t.Helper()
	err := client.Do(func() error {
		c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(netip.AddrPortFrom(addr, 9)))
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Write([]byte("mooring responder test"))
		return err
	})
	if err != nil {
		t.Fatalf("sending to %s: %v", addr, err)
	}
}

// awaitNeighbor polls the client's neighbour entry for addr until it holds
// mac, returning how long that took since start.
func awaitNeighbor(t *testing.T, client *netlab.Host, addr netip.Addr, mac net.HardwareAddr, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	var got net.HardwareAddr
	var state netlab.NeighState
	for time.Since(start) < limit {
		var err error
		got, state, err = client.Neighbor(addr)
		if err != nil && !errors.Is(err, netlab.ErrNoNeighbor) {
			t.Fatal(err)
		}
		if bytes.Equal(got, mac) {
			return time.Since(start)
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("client's neighbour entry for %s: %v (%s) after %v, want %s", addr, got, state, limit, mac)
	return 0
}

func TestTakeoverUpdatesClientNeighbourTable(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	client := l.Client()
	n1, n2 := l.Nodes()[0], l.Nodes()[1]
	r1, r2 := startChild(t, n1), startChild(t, n2)
	r1.apply(t, labVIP4, labVIP6)
	r2.apply(t) // running, owning nothing
	vips := []netip.Addr{labVIP4, labVIP6}
	for _, a := range vips {
		awaitOwners(t, l, a, n1.MAC)
	}
	for _, a := range vips {
		touch(t, client, a)
		awaitNeighbor(t, client, a, n1.MAC, time.Now(), 2*time.Second)
		_, state, _ := client.Neighbor(a)
		t.Logf("client: %s -> node-1 (%s)", a, state)
	}

	// node-1 dies; node-2 takes over. The client's entries are fresh
	// (REACHABLE): without announcements it would keep node-1's MAC for
	// 15-45 s, then probe it, then re-resolve.
	if err := r1.proc.Kill(); err != nil {
		t.Fatal(err)
	}
	<-r1.proc.Done()
	for _, a := range vips {
		if mac, state, err := client.Neighbor(a); err != nil || !bytes.Equal(mac, n1.MAC) {
			t.Fatalf("before takeover: %s -> %v %s (%v), want node-1's MAC", a, mac, state, err)
		}
	}
	start := time.Now()
	r2.apply(t, labVIP4, labVIP6)
	var took []string
	for _, a := range vips {
		d := awaitNeighbor(t, client, a, n2.MAC, start, 2*time.Second)
		took = append(took, fmt.Sprintf("%s: %v", a, d.Round(time.Millisecond)))
	}
	t.Logf("MEASURED client neighbour entry flipped to node-2 (from Apply, incl. IPC) after %v", took)
	for _, a := range vips {
		awaitOwners(t, l, a, n2.MAC)
	}
}
