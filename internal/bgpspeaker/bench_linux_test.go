package bgpspeaker_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/ipalloc"
)

// The speaker's own share of the figures, against FRR (bgpd and
// zebra) in the test's lab; off unless BGPSPEAKER_BENCH=1 (they take a
// minute and belong in docs/benchmarks.md with the machine's load):
//
//	BGPSPEAKER_BENCH=1 go test ./internal/bgpspeaker -run 'TestBench' -v -count=1

func benchOnly(t *testing.T) {
	if os.Getenv("BGPSPEAKER_BENCH") != "1" {
		t.Skip("set BGPSPEAKER_BENCH=1 to run the speaker's benchmarks")
	}
}

// routeWatch reports when the router's kernel gets a route for a prefix.
type routeWatch struct {
	ch   chan netlink.RouteUpdate
	done chan struct{}
}

func watchRoutes(t *testing.T, ns netns.NsHandle) *routeWatch {
	t.Helper()
	w := &routeWatch{ch: make(chan netlink.RouteUpdate, 65536), done: make(chan struct{})}
	if err := netlink.RouteSubscribeWithOptions(w.ch, w.done, netlink.RouteSubscribeOptions{Namespace: &ns}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { close(w.done) })
	return w
}

// wait returns when a route for p is added (or deleted when del).
func (w *routeWatch) wait(t *testing.T, p netip.Prefix, del bool, within time.Duration) time.Time {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case u := <-w.ch:
			if u.Dst == nil {
				continue
			}
			got, ok := netip.AddrFromSlice(u.Dst.IP)
			ones, _ := u.Dst.Mask.Size()
			if ok && netip.PrefixFrom(got.Unmap(), ones) == p && (u.Type == 25) == del { // 25: RTM_DELROUTE
				return time.Now()
			}
		case <-deadline:
			t.Fatalf("no route update for %s within %s", p, within)
		}
	}
}

func percentile(d []time.Duration, p float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(float64(len(s)-1) * p)
	return s[i]
}

func rss(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "?"
}

// TestBenchServiceToRoute: one Service at a time (n = 50), from the
// decision handed to the speaker to the route in the router's kernel
// table (FRR bgpd and zebra included), and back on delete.
func TestBenchServiceToRoute(t *testing.T) {
	benchOnly(t)
	f := newFabric(t, 1, nil)
	f.in.Peers = []bgp.Peer{v4peer()}
	f.apply(nil)
	f.waitEstablished("tor-v4")
	w := watchRoutes(t, f.router.NS())
	var add, del []time.Duration
	for i := range 50 {
		ip := fmt.Sprintf("10.213.0.%d", 96+i%31)
		p := netip.MustParsePrefix(ip + "/32")
		f.in.Services = []*announce.Service{service(fmt.Sprintf("s%d", i), false, nil, ip)}
		start := time.Now()
		f.apply(nil)
		add = append(add, w.wait(t, p, false, 10*time.Second).Sub(start))
		f.in.Services = nil
		start = time.Now()
		f.apply(nil)
		del = append(del, w.wait(t, p, true, 10*time.Second).Sub(start))
	}
	t.Logf("Service -> route in the router's kernel, n=%d: p50 %v p99 %v max %v; delete -> gone: p50 %v p99 %v max %v",
		len(add), percentile(add, .5), percentile(add, .99), percentile(add, 1), percentile(del, .5), percentile(del, .99), percentile(del, 1))
}

// TestBenchTenThousand: 10,000 dual-stack Services' routes from one node:
// how long after the session comes up the router holds them all, and the
// speaker process's memory (GoBGP with every route, per-peer tables).
func TestBenchTenThousand(t *testing.T) {
	benchOnly(t)
	f := newFabric(t, 1, func(c *frr.Config) { c.MaximumPaths = 1 })
	f.in.Pools = []bgp.Pool{{Name: "big", Ranges: []ipalloc.Range{
		ipalloc.PrefixRange(netip.MustParsePrefix("10.100.0.0/16")), ipalloc.PrefixRange(netip.MustParsePrefix("fd00:100::/64"))}}}
	for i := range 10000 {
		f.in.Services = append(f.in.Services, service(fmt.Sprintf("s%d", i), false, nil,
			netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)}).String(), fmt.Sprintf("fd00:100::%x", i+1)))
	}
	sp := f.speakers["node-1"]
	t.Logf("speaker before: %s", rss(sp.proc.PID))
	// The routes first (as an agent starting with 10,000 Services in its
	// cache), then the session.
	f.apply(nil)
	f.in.Peers = []bgp.Peer{v4peer()}
	start := time.Now()
	f.apply(nil)
	f.waitEstablished("tor-v4")
	up := time.Since(start)
	eventually(t, 60*time.Second, "20,000 prefixes at the router", func() (bool, string) {
		s, err := f.frr.Sessions(context.Background())
		n := 0
		for _, ses := range s {
			for _, c := range ses.AcceptedPrefixes {
				n += c
			}
		}
		return err == nil && n == 20000, strconv.Itoa(n)
	})
	all := time.Since(start)
	r, err := sp.call(command{Op: "mem"})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("10,000 dual-stack Services: session up %v after the peer was added, all 20,000 prefixes at the router %v after (%v after the session came up); speaker process heap after GC %.1f MiB, %s (after GC and FreeOSMemory), %s (peak, incl. decoding the test's JSON)",
		up.Round(time.Millisecond), all.Round(time.Millisecond), (all - up).Round(time.Millisecond), float64(r.HeapInuse)/(1<<20), rss(sp.proc.PID), hwm(sp.proc.PID))
}

func hwm(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return "?"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return "?"
}
