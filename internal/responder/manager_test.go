package responder

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mdlayher/arp"
	"github.com/mdlayher/ethernet"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"
)

// writeSeq numbers every frame any fakeConn writes, to tell the order
// across connections.
var writeSeq atomic.Int64

// fakeConn is a GroupConn fed by the test.
type fakeConn struct {
	in     chan []byte
	mu     sync.Mutex
	out    [][]byte
	seqs   []int64 // writeSeq of each frame in out
	groups map[string]bool
	closed chan struct{}
	once   sync.Once
}

func newFakeConn() *fakeConn {
	return &fakeConn{in: make(chan []byte, 16), groups: map[string]bool{}, closed: make(chan struct{})}
}

func (c *fakeConn) ReadFrom(b []byte) (int, net.Addr, error) {
	select {
	case f := <-c.in:
		return copy(b, f), nil, nil
	case <-c.closed:
		return 0, nil, net.ErrClosed
	}
}

func (c *fakeConn) WriteTo(b []byte, addr net.Addr) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.out = append(c.out, append([]byte(nil), b...))
	c.seqs = append(c.seqs, writeSeq.Add(1))
	return len(b), nil
}

func (c *fakeConn) Close() error                       { c.once.Do(func() { close(c.closed) }); return nil }
func (c *fakeConn) LocalAddr() net.Addr                { return nil }
func (c *fakeConn) SetDeadline(time.Time) error        { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error    { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error   { return nil }
func (c *fakeConn) JoinGroup(a net.HardwareAddr) error { c.setGroup(a, true); return nil }
func (c *fakeConn) LeaveGroup(a net.HardwareAddr) error {
	c.setGroup(a, false)
	return nil
}

func (c *fakeConn) setGroup(a net.HardwareAddr, on bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if on {
		c.groups[a.String()] = true
	} else {
		delete(c.groups, a.String())
	}
}

func (c *fakeConn) written() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([][]byte(nil), c.out...)
}

func (c *fakeConn) writeSeqs() []int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]int64(nil), c.seqs...)
}

func (c *fakeConn) hasGroup(a net.HardwareAddr) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.groups[a.String()]
}

func (c *fakeConn) isClosed() bool {
	select {
	case <-c.closed:
		return true
	default:
		return false
	}
}

// fakeNet opens fake links and remembers them by ifindex.
type fakeNet struct {
	mu    sync.Mutex
	links map[int]*Link
	fail  int // fail this many opens first
	opens int
}

func (n *fakeNet) open(ifindex int) (*Link, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.opens++
	if n.fail > 0 {
		n.fail--
		return nil, errors.New("link not ready")
	}
	mac := net.HardwareAddr{0x02, 0, 0, 0, byte(ifindex), 0x01}
	l := &Link{Index: ifindex, Name: "eth" + string(rune('0'+ifindex)), MAC: mac, ARP: newFakeConn(), NDP: newFakeConn()}
	n.links[ifindex] = l
	return l, nil
}

func (n *fakeNet) link(ifindex int) *Link {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[ifindex]
}

func (n *fakeNet) openCount() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.opens
}

// eventually polls cond for up to 2 s.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(2 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("timed out waiting for %s", what)
}

type harness struct {
	net   *fakeNet
	m     *Manager
	clock *clocktesting.FakeClock
	reg   *prometheus.Registry
	done  chan error
}

func startManager(t *testing.T, fail int) *harness {
	t.Helper()
	h := &harness{
		net:   &fakeNet{links: map[int]*Link{}, fail: fail},
		clock: clocktesting.NewFakeClock(time.Unix(1e9, 0)),
		reg:   prometheus.NewRegistry(),
		done:  make(chan error, 1),
	}
	h.m = NewWithOpener(Config{GratuitousCount: 3, GratuitousInterval: 100 * time.Millisecond, Clock: h.clock}, nil, h.reg, h.net.open)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { h.done <- h.m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-h.done:
			if err != nil {
				t.Errorf("Run: %v", err)
			}
		case <-time.After(2 * time.Second):
			t.Error("Run did not return after cancel")
		}
	})
	return h
}

// value reads a counter or gauge (testutil would pull a module we lack).
func value(m prometheus.Metric) float64 {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		panic(err)
	}
	if d.Counter != nil {
		return d.Counter.GetValue()
	}
	return d.Gauge.GetValue()
}

func conn(c GroupConn) *fakeConn { return c.(*fakeConn) }

func TestManagerAnswersOnlyForItsInterface(t *testing.T) {
	h := startManager(t, 0)
	h.m.Apply(map[int][]netip.Addr{1: {vip4, vip6}, 2: {other4}})
	eventually(t, "both links open", func() bool { return h.net.link(1) != nil && h.net.link(2) != nil })
	l1, l2 := h.net.link(1), h.net.link(2)
	eventually(t, "gratuitous frames on eth1", func() bool { return len(conn(l1.ARP).written()) == 2 })
	base1, base2 := len(conn(l1.ARP).written()), len(conn(l2.ARP).written())

	conn(l2.ARP).in <- arpRequest(t, clientMAC, client4, vip4, nil) // vip4 is not eth2's
	conn(l1.ARP).in <- arpRequest(t, clientMAC, client4, vip4, nil)
	eventually(t, "ARP reply on eth1", func() bool { return len(conn(l1.ARP).written()) == base1+1 })
	reply := conn(l1.ARP).written()[base1]
	var f ethernet.Frame
	var p arp.Packet
	if err := f.UnmarshalBinary(reply); err != nil || p.UnmarshalBinary(f.Payload) != nil {
		t.Fatalf("reply does not parse: %v", err)
	}
	if p.SenderIP != vip4 || p.SenderHardwareAddr.String() != l1.MAC.String() {
		t.Errorf("reply %+v, want %s at %s", p, vip4, l1.MAC)
	}
	g6, gmac := snm(t, vip6)
	conn(l1.NDP).in <- nsFrame(clientMAC, client6, g6, vip6, gmac, true)
	eventually(t, "NA on eth1", func() bool {
		return value(h.m.met.replies.WithLabelValues(familyIPv6, l1.Name)) == 1
	})
	if !conn(l1.NDP).hasGroup(gmac) {
		t.Errorf("eth1 did not join %s", gmac)
	}
	eventually(t, "request on eth2 counted", func() bool {
		return value(h.m.met.requests.WithLabelValues(familyIPv4, l2.Name, "false")) == 1
	})
	if got := len(conn(l2.ARP).written()); got != base2 {
		t.Errorf("eth2 answered for an address it does not own (%d frames written)", got-base2)
	}

	// Dropping eth2 from the table closes it; dropping vip6 leaves its group.
	h.m.Apply(map[int][]netip.Addr{1: {vip4}})
	eventually(t, "eth2 closed", func() bool { return conn(l2.ARP).isClosed() && conn(l2.NDP).isClosed() })
	eventually(t, "group left", func() bool { return !conn(l1.NDP).hasGroup(gmac) })
	if g := value(h.m.met.interfaces); g != 1 {
		t.Errorf("interfaces gauge %v, want 1", g)
	}
}

func TestManagerGratuitousSchedule(t *testing.T) {
	h := startManager(t, 0)
	h.m.Apply(map[int][]netip.Addr{1: {vip4, vip6}})
	eventually(t, "link open", func() bool { return h.net.link(1) != nil })
	l := h.net.link(1)
	arpc, ndpc := conn(l.ARP), conn(l.NDP)
	round := func(n int) {
		t.Helper()
		eventually(t, "announcement round", func() bool {
			return len(arpc.written()) == 2*n && len(ndpc.written()) == n
		})
	}
	round(1) // at once
	for n, gap := 2, 100*time.Millisecond; n <= 3; n, gap = n+1, gap*2 {
		eventually(t, "timer armed", h.clock.HasWaiters)
		h.clock.Step(gap - time.Millisecond)
		time.Sleep(20 * time.Millisecond)
		round(n - 1) // not yet: the gap doubles each round
		h.clock.Step(time.Millisecond)
		round(n)
	}
	h.clock.Step(time.Second)
	time.Sleep(20 * time.Millisecond)
	round(3) // GratuitousCount (3) reached: no more
	if got := value(h.m.met.gratuitous.WithLabelValues(familyIPv4, l.Name)); got != 6 {
		t.Errorf("gratuitous ipv4 = %v, want 6 frames (3 x request+reply)", got)
	}

	// Re-applying the same table announces nothing; re-adding a removed
	// address (a takeover back) announces it again.
	h.m.Apply(map[int][]netip.Addr{1: {vip4, vip6}})
	h.m.Apply(map[int][]netip.Addr{1: {vip6}})
	// Applies coalesce, so wait until vip4 is really gone before re-adding.
	eventually(t, "vip4 released", func() bool {
		arpc.in <- arpRequest(t, clientMAC, client4, vip4, nil)
		time.Sleep(2 * time.Millisecond)
		return value(h.m.met.requests.WithLabelValues(familyIPv4, l.Name, "false")) > 0
	})
	h.m.Apply(map[int][]netip.Addr{1: {vip4, vip6}})
	eventually(t, "re-announce of vip4", func() bool { return len(arpc.written()) >= 8 })
	arpBase := len(arpc.written()) // 6 announcements, replies to the probes above, 2 new
	time.Sleep(20 * time.Millisecond)
	if n := len(ndpc.written()); n != 3 {
		t.Errorf("vip6 announced again although it never left (%d NAs)", n)
	}
	// Removing an address cancels its remaining announcements.
	h.m.Apply(map[int][]netip.Addr{1: {vip6}})
	time.Sleep(20 * time.Millisecond)
	h.clock.Step(time.Second)
	time.Sleep(20 * time.Millisecond)
	if n := len(arpc.written()); n != arpBase {
		t.Errorf("sent %d ARP frames after vip4 was removed", n-arpBase)
	}
}

// A takeover of many addresses sends every address its first frame before
// any second one, and alternates the families: the last address of a
// round of thousands does not wait for both ARP forms of every other, nor
// IPv6 for all of IPv4.
func TestManagerRoundFirstFramesFirst(t *testing.T) {
	h := startManager(t, 0)
	var addrs []netip.Addr
	for i := range 4 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 9, 0, byte(10 + i)}), netip.AddrFrom16([16]byte{0: 0xfd, 3: 9, 15: byte(10 + i)}))
	}
	h.m.Apply(map[int][]netip.Addr{1: addrs})
	eventually(t, "link open", func() bool { return h.net.link(1) != nil })
	l := h.net.link(1)
	arpc, ndpc := conn(l.ARP), conn(l.NDP)
	eventually(t, "first round", func() bool { return len(arpc.written()) == 8 && len(ndpc.written()) == 4 })
	frames, arpSeq, ndpSeq := arpc.written(), arpc.writeSeqs(), ndpc.writeSeqs()
	const opOffset = 14 + 7 // Ethernet header, then the low byte of ARP's operation
	for i, f := range frames {
		want := arp.OperationRequest
		if i >= 4 {
			want = arp.OperationReply
		}
		if got := arp.Operation(f[opOffset]); got != want {
			t.Errorf("ARP frame %d is %v, want %v (every first form before any second one)", i, got, want)
		}
	}
	for i := range 4 {
		if ndpSeq[i] != arpSeq[i]+1 {
			t.Errorf("NA %d went out as frame %d, want right after IPv4 request %d (frame %d): families alternate", i, ndpSeq[i], i, arpSeq[i])
		}
		if ndpSeq[i] > arpSeq[4] {
			t.Errorf("NA %d (frame %d) went out after the first second-form ARP (frame %d)", i, ndpSeq[i], arpSeq[4])
		}
	}
}

func TestManagerRetriesFailedOpen(t *testing.T) {
	h := startManager(t, 2)
	h.m.Apply(map[int][]netip.Addr{1: {vip4}})
	eventually(t, "unhealthy while the open fails", func() bool { return h.m.Healthy() != nil })
	for want := 2; want <= 3; want++ {
		eventually(t, "retry timer", h.clock.HasWaiters)
		h.clock.Step(time.Second)
		eventually(t, "open retried", func() bool { return h.net.openCount() == want })
	}
	eventually(t, "link open and announced", func() bool {
		l := h.net.link(1)
		return l != nil && len(conn(l.ARP).written()) == 2
	})
	if got := value(h.m.met.errors.WithLabelValues("open")); got != 2 {
		t.Errorf("open errors %v, want 2", got)
	}
	if err := h.m.Healthy(); err != nil {
		t.Errorf("healthy after the open succeeded: %v", err)
	}
}

func TestManagerRunClosesEverything(t *testing.T) {
	net := &fakeNet{links: map[int]*Link{}}
	m := NewWithOpener(Config{}, nil, nil, net.open)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	m.Apply(map[int][]netip.Addr{3: {vip4}, 4: {vip6}})
	eventually(t, "links open", func() bool { return net.link(3) != nil && net.link(4) != nil })
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Run did not return")
	}
	for _, i := range []int{3, 4} {
		if l := net.link(i); !conn(l.ARP).isClosed() || !conn(l.NDP).isClosed() {
			t.Errorf("link %d left open", i)
		}
	}
}

func TestConfigValidate(t *testing.T) {
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("zero config: %v", err)
	}
	for _, c := range []Config{{GratuitousCount: -1}, {GratuitousInterval: -1}, {RetryInterval: -time.Second}} {
		if c.Validate() == nil {
			t.Errorf("%+v accepted", c)
		}
	}
}

func TestManagerEmptyTableClosesInterface(t *testing.T) {
	h := startManager(t, 0)
	h.m.Apply(map[int][]netip.Addr{1: {vip4}, 2: nil, 3: {netip.Addr{}}})
	eventually(t, "eth1 open", func() bool { return h.net.link(1) != nil })
	time.Sleep(20 * time.Millisecond)
	if h.net.link(2) != nil || h.net.link(3) != nil {
		t.Error("opened listeners for an interface with no valid address")
	}
	l := h.net.link(1)
	h.m.Apply(map[int][]netip.Addr{1: {}})
	eventually(t, "eth1 closed", func() bool { return conn(l.ARP).isClosed() })
}

func TestManagerReannounce(t *testing.T) {
	h := startManager(t, 0)
	h.m.Apply(map[int][]netip.Addr{1: {vip4}})
	eventually(t, "link open", func() bool { return h.net.link(1) != nil })
	arpc := conn(h.net.link(1).ARP)
	eventually(t, "takeover round", func() bool { return len(arpc.written()) == 2 })
	// An owned address gets a new round at once; one not owned gets none.
	h.m.Reannounce(1, vip4)
	eventually(t, "re-announce round", func() bool { return len(arpc.written()) == 4 })
	h.m.Reannounce(1, client4)
	h.m.Reannounce(7, vip4)
	time.Sleep(20 * time.Millisecond)
	if n := len(arpc.written()); n != 4 {
		t.Errorf("%d ARP frames after re-announcing unowned addresses, want 4", n)
	}
}

// A round's addresses go out in a random order within each family, so the
// highest addresses are not the last of every takeover (in address order
// the same Services waited for the whole round each time).
func TestManagerRoundNotInAddressOrder(t *testing.T) {
	h := startManager(t, 0)
	var addrs []netip.Addr
	for i := range 64 {
		addrs = append(addrs, netip.AddrFrom4([4]byte{10, 9, 1, byte(i)}))
	}
	h.m.Apply(map[int][]netip.Addr{1: addrs})
	eventually(t, "link open", func() bool { return h.net.link(1) != nil })
	arpc := conn(h.net.link(1).ARP)
	eventually(t, "first round", func() bool { return len(arpc.written()) >= 128 })
	const spaOffset = 14 + 14 // Ethernet header, then ARP's sender protocol address
	var sent []netip.Addr
	for _, f := range arpc.written()[:64] {
		sent = append(sent, netip.AddrFrom4([4]byte(f[spaOffset:spaOffset+4])))
	}
	if slices.IsSortedFunc(sent, netip.Addr.Compare) {
		t.Fatalf("the first frames went out in address order: %v", sent)
	}
	slices.SortFunc(sent, netip.Addr.Compare)
	if !slices.Equal(sent, addrs) {
		t.Fatalf("the first 64 frames name %v, want each of the 64 addresses once", sent)
	}
}
