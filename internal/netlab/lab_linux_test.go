package netlab

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestLabPingsEveryNode(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 3})
	ctx := testCtx(t)

	if got := len(l.Nodes()); got != 3 {
		t.Fatalf("len(Nodes()) = %d, want 3", got)
	}
	c := l.Client()
	if c.Name != ClientName || c.Addr4 != netip.MustParseAddr("10.213.0.250") || c.Addr6 != netip.MustParseAddr("fd00:213::fa") {
		t.Fatalf("client = %s %s %s, want client 10.213.0.250 fd00:213::fa", c.Name, c.Addr4, c.Addr6)
	}
	for i, n := range l.Nodes() {
		if want := NodeName(i + 1); n.Name != want || l.Host(want) != n {
			t.Fatalf("node %d is %q (Host(%q) = %v)", i, n.Name, want, l.Host(want))
		}
		ifi, err := n.Interface()
		if err != nil {
			t.Fatal(err)
		}
		if ifi.Index != n.IfIndex || ifi.Name != "eth0" || ifi.HardwareAddr.String() != n.MAC.String() || ifi.Flags&net.FlagUp == 0 {
			t.Fatalf("%s: Interface() = %+v, want eth0 #%d %s up", n.Name, ifi, n.IfIndex, n.MAC)
		}
		for _, a := range []netip.Addr{n.Addr4, n.Addr6} {
			if err := Ping(ctx, c, a); err != nil {
				t.Fatalf("ping %s (%s) from client: %v", a, n.Name, err)
			}
		}
		// The ping made the client learn the node's MAC.
		mac, state, err := c.Neighbor(n.Addr4)
		if err != nil || mac.String() != n.MAC.String() {
			t.Fatalf("client neighbour %s = %s %s %v, want %s", n.Addr4, mac, state, err, n.MAC)
		}
	}
	if l.Host("node-9") != nil {
		t.Fatal(`Host("node-9") != nil`)
	}
	if _, _, err := c.Neighbor(netip.MustParseAddr("10.213.0.123")); !errors.Is(err, ErrNoNeighbor) {
		t.Fatalf("Neighbor(unused) error = %v, want ErrNoNeighbor", err)
	}
}

func TestHostDoRunsInNamespace(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 1, NodeSysctls: map[string]string{"net.ipv4.conf.all.arp_ignore": "1"}})
	n := l.Nodes()[0]
	for h, want := range map[*Host]string{n: "1", l.Client(): "0"} {
		var got []byte
		err := h.Do(func() error {
			var err error
			got, err = os.ReadFile("/proc/sys/net/ipv4/conf/all/arp_ignore")
			return err
		})
		if err != nil || strings.TrimSpace(string(got)) != want {
			t.Fatalf("%s: arp_ignore = %q, %v; want %s", h.Name, got, err, want)
		}
	}
	var threadNS, want uint64
	err := n.Do(func() error {
		var err error
		threadNS, err = nsInode("/proc/thread-self/ns/net")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if want = fdInode(t, int(n.NS())); threadNS != want {
		t.Fatalf("Do ran in namespace %d, want %d", threadNS, want)
	}
	nl, err := n.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	if link, err := nl.LinkByName("eth0"); err != nil || link.Attrs().Index != n.IfIndex {
		t.Fatalf("NetlinkHandle: eth0 = %v, %v; want ifindex %d", link, err, n.IfIndex)
	}
	// Sysctl goes to the host's namespace, not the test process's.
	const path = "/proc/sys/net/ipv4/conf/lo/arp_announce"
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	val := "2"
	if strings.TrimSpace(string(before)) == val {
		val = "1"
	}
	if err := n.Sysctl("net.ipv4.conf.lo.arp_announce", val); err != nil {
		t.Fatal(err)
	}
	var inside []byte
	if err := n.Do(func() error { inside, err = os.ReadFile(path); return err }); err != nil {
		t.Fatal(err)
	}
	after, _ := os.ReadFile(path)
	if strings.TrimSpace(string(inside)) != val || !bytes.Equal(after, before) {
		t.Fatalf("after Sysctl: %s's value %q, test process's %q (was %q); want %q and unchanged",
			n.Name, inside, after, before, val)
	}
	if err := n.Sysctl("kernel.hostname", "x"); err == nil {
		t.Fatal("Sysctl outside net. succeeded")
	}
}

func TestProbe(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 3})
	ctx := testCtx(t)
	c, nodes := l.Client(), l.Nodes()
	const wait = 200 * time.Millisecond

	probe := func(addr netip.Addr, want ...*Host) {
		t.Helper()
		got, err := Probe(ctx, c, addr, wait)
		if err != nil {
			t.Fatalf("Probe(%s): %v", addr, err)
		}
		var wantMACs []string
		for _, h := range want {
			wantMACs = append(wantMACs, h.MAC.String())
		}
		slices.Sort(wantMACs)
		var gotMACs []string
		for _, m := range got {
			gotMACs = append(gotMACs, m.String())
		}
		if !slices.Equal(gotMACs, wantMACs) {
			t.Fatalf("Probe(%s) = %v, want %v", addr, gotMACs, wantMACs)
		}
	}

	vip4 := netip.MustParseAddr("10.213.0.100")
	probe(vip4)                     // nobody holds it
	probe(nodes[0].Addr4, nodes[0]) // a node's own address

	// The stale kube-ipvs0 trap: the VIP left on lo of two nodes with the
	// default arp_ignore=0 makes both kernels answer on eth0.
	for _, n := range nodes[:2] {
		if err := n.AddAddr("lo", netip.PrefixFrom(vip4, 32)); err != nil {
			t.Fatal(err)
		}
	}
	probe(vip4, nodes[0], nodes[1])
	if err := nodes[0].Sysctl("net.ipv4.conf.eth0.arp_ignore", "1"); err != nil {
		t.Fatal(err)
	}
	probe(vip4, nodes[1])
	if err := nodes[1].DelAddr("lo", netip.PrefixFrom(vip4, 32)); err != nil {
		t.Fatal(err)
	}
	probe(vip4)

	probe(netip.MustParseAddr("fd00:213::64")) // nobody
	probe(nodes[1].Addr6, nodes[1])
}

func TestProbeHonoursContext(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	_, err := Probe(ctx, l.Client(), l.Nodes()[0].Addr4, 5*time.Second)
	if !errors.Is(err, context.Canceled) || time.Since(start) > time.Second {
		t.Fatalf("Probe with cancelled ctx = %v after %v, want context.Canceled at once", err, time.Since(start))
	}
}

func nsInode(path string) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

func fdInode(t testing.TB, fd int) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// threadsIn counts this process's threads that are inside namespace ino.
func threadsIn(t testing.TB, ino uint64) int {
	t.Helper()
	paths, err := filepath.Glob("/proc/self/task/*/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, p := range paths {
		if got, err := nsInode(p); err == nil && got == ino {
			n++
		}
	}
	return n
}

func TestCloseIsIdempotentAndFast(t *testing.T) {
	RequirePrivileges(t)
	l, err := New(testCtx(t), Config{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	n := l.Nodes()[0]
	ino := fdInode(t, int(n.NS()))
	if got := threadsIn(t, ino); got != 1 {
		t.Fatalf("%d threads in %s's namespace, want its one worker", got, n.Name)
	}
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := n.Do(func() error { return nil }); !errors.Is(err, ErrClosed) {
		t.Fatalf("Do after Close = %v, want ErrClosed", err)
	}
	if _, err := n.Start(sleepCmd(t)); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close = %v, want ErrClosed", err)
	}
	// A closed netlink handle would fall back to the machine's own
	// namespace; every helper must refuse instead.
	if err := n.AddAddr("lo", netip.MustParsePrefix("10.213.0.199/32")); !errors.Is(err, ErrClosed) {
		t.Fatalf("AddAddr after Close = %v, want ErrClosed", err)
	}
	if _, _, err := n.Neighbor(n.Addr4); !errors.Is(err, ErrClosed) {
		t.Fatalf("Neighbor after Close = %v, want ErrClosed", err)
	}
	if _, err := n.NetlinkHandle(); !errors.Is(err, ErrClosed) {
		t.Fatalf("NetlinkHandle after Close = %v, want ErrClosed", err)
	}
	// The worker thread exits shortly after its goroutine; poll for it.
	for deadline := time.Now().Add(2 * time.Second); threadsIn(t, ino) != 0; {
		if time.Now().After(deadline) {
			t.Fatalf("a thread is still in %s's namespace after Close", n.Name)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
