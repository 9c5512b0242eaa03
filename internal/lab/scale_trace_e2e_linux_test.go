package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mdlayher/packet"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/netlab"
)

// This file lets TestBenchLabServices explain its own tail: every Service's
// way from its create call to its address answering ARP, stage by stage,
// seen from outside the components (no component is changed for it):
//
//	sent     the create call leaves the bench
//	created  the create call returned (the Service exists; "creation")
//	added    the bench's watch delivers the new Service (the controller's
//	         and agents' watches get it about then)
//	status   the bench's watch delivers the controller's status write with
//	         the address (its resourceVersion is kept)
//	garp     the first gratuitous ARP for the address on the lab link: the
//	         owner's responder took the address (it sends one at once)
//	arp      the first answer to the bench's ARP probe (sampled Services)
//
// A slow sample thus says whether the time went to the API server (create
// call, watch delivery), the controller (added → status), the agent
// (status → garp) or the probe (garp → arp). All times are when the
// bench's goroutines saw the event: on a starved machine they are upper
// bounds, which is why the CPU pressure is reported beside them.

// svcTrace is one Service's stages; a zero time was never seen.
type svcTrace struct {
	i                                       int
	name                                    string
	addr                                    netip.Addr
	sampled                                 bool
	sent, created, added, status, garp, arp time.Time
	// route: the router's kernel first held the address over one next hop
	// per node (the BGP lab; from the kernel's notification, or from a 2 s
	// read when one was lost: routeTracer).
	route    time.Time
	statusRV string
}

// tracer holds every Service's trace; the maps are filled before the run
// and only read after, the fields change under mu.
type tracer struct {
	mu     sync.Mutex
	byName map[string]*svcTrace
	byAddr map[netip.Addr]*svcTrace
	all    []*svcTrace
	// sampled are probed with ARP requests until they answer.
	sampled []*svcTrace
	// garps counts gratuitous frames seen; drops is what the sniffer's
	// socket lost (its trace would then be missing, never wrong).
	garps, drops int
}

func newTracer(n int, name func(int) string, addr func(int) netip.Addr, sampled func(int) bool) *tracer {
	tr := &tracer{byName: make(map[string]*svcTrace, n), byAddr: make(map[netip.Addr]*svcTrace, n)}
	for i := range n {
		s := &svcTrace{i: i, name: name(i), addr: addr(i), sampled: sampled(i)}
		tr.byName[s.name], tr.byAddr[s.addr] = s, s
		tr.all = append(tr.all, s)
		if s.sampled {
			tr.sampled = append(tr.sampled, s)
		}
	}
	return tr
}

// set records *field = at unless it was set before.
func (tr *tracer) set(s *svcTrace, field func(*svcTrace) *time.Time, at time.Time) (first bool) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if f := field(s); f.IsZero() {
		*f = at
		return true
	}
	return false
}

// watchServices follows the Services of ns from now until ctx ends: the
// first sighting of each bench Service, and of its address in status.
func (tr *tracer) watchServices(ctx context.Context, t *testing.T, cs kubernetes.Interface, ns string) {
	svcs := cs.CoreV1().Services(ns)
	l, err := svcs.List(ctx, metav1.ListOptions{Limit: 1})
	if err != nil {
		t.Fatal(err)
	}
	rv := l.ResourceVersion
	go func() {
		for ctx.Err() == nil {
			w, err := svcs.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
			if err != nil {
				if ctx.Err() == nil {
					t.Logf("BENCH trace: watch: %v (retrying)", err)
					time.Sleep(100 * time.Millisecond)
				}
				continue
			}
			for ev := range w.ResultChan() {
				now := time.Now()
				svc, ok := ev.Object.(*corev1.Service)
				if !ok {
					continue
				}
				rv = svc.ResourceVersion
				s := tr.byName[svc.Name]
				if s == nil || (ev.Type != watch.Added && ev.Type != watch.Modified) {
					continue
				}
				tr.mu.Lock()
				if s.added.IsZero() {
					s.added = now
				}
				if s.status.IsZero() && len(svc.Status.LoadBalancer.Ingress) > 0 {
					s.status, s.statusRV = now, svc.ResourceVersion
				}
				tr.mu.Unlock()
			}
			w.Stop()
		}
	}()
}

// sniff watches h's eth0 until ctx ends, recording for every bench
// address the first gratuitous ARP (sender address = target address), and
// probes the sampled ones: every 20 ms, from its create call returning
// until the first answer, an ARP request for each sampled address goes out
// from h, and the first reply to h's MAC is the answer. One socket does
// it all, read by one goroutine: opening a socket per attempt (netlab.Probe)
// queues every attempt on the namespace's one worker thread, which on a
// starved machine delayed answers by seconds that no component caused.
func (tr *tracer) sniff(ctx context.Context, t *testing.T, h *netlab.Host) {
	ifi, err := h.Interface()
	if err != nil {
		t.Fatal(err)
	}
	var conn net.PacketConn
	if err := h.Do(func() error {
		var err error
		conn, err = arpprobe.Listen(ifi, arpprobe.IPv4)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	pc := conn.(*packet.Conn)
	if rc, err := pc.SyscallConn(); err == nil {
		_ = rc.Control(func(fd uintptr) {
			_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 8<<20)
		})
	}
	go func() { <-ctx.Done(); _ = conn.Close() }()
	go func() {
		buf := make([]byte, 1600)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				if st, err := pc.Stats(); err == nil {
					tr.mu.Lock()
					tr.drops = int(st.Drops)
					tr.mu.Unlock()
				}
				return
			}
			now := time.Now()
			f, ok := parseARP(buf[:n])
			if !ok {
				continue
			}
			s := tr.byAddr[f.spa]
			if s == nil {
				continue
			}
			tr.mu.Lock()
			switch {
			case f.spa == f.tpa:
				tr.garps++
				if s.garp.IsZero() {
					s.garp = now
				}
			case f.reply && bytes.Equal(f.tha, ifi.HardwareAddr) && f.tpa == h.Addr4 && s.sampled && s.arp.IsZero():
				s.arp = now
			}
			tr.mu.Unlock()
		}
	}()
	go tr.probe(ctx, conn, ifi.HardwareAddr, h.Addr4)
}

// probe sends, every 20 ms, one ARP request for each sampled address that
// was created and has not answered yet.
func (tr *tracer) probe(ctx context.Context, conn net.PacketConn, mac net.HardwareAddr, src netip.Addr) {
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	bcast := &packet.Addr{HardwareAddr: net.HardwareAddr{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}}
	var due []netip.Addr
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		due = due[:0]
		tr.mu.Lock()
		for _, s := range tr.sampled {
			if !s.created.IsZero() && s.arp.IsZero() {
				due = append(due, s.addr)
			}
		}
		tr.mu.Unlock()
		for _, a := range due {
			_, _ = conn.WriteTo(arpRequest(mac, src, a), bcast)
		}
	}
}

// arpFrame is what the tracer reads of an ARP frame.
type arpFrame struct {
	reply    bool
	spa, tpa netip.Addr
	tha      net.HardwareAddr
}

// parseARP reads an Ethernet frame carrying IPv4-over-Ethernet ARP.
func parseARP(f []byte) (arpFrame, bool) {
	const eth = 14
	if len(f) < eth+28 || f[12] != 0x08 || f[13] != 0x06 {
		return arpFrame{}, false
	}
	a := f[eth:]
	return arpFrame{
		reply: a[6] == 0 && a[7] == 2,
		spa:   netip.AddrFrom4([4]byte(a[14:18])),
		tha:   net.HardwareAddr(a[18:24]),
		tpa:   netip.AddrFrom4([4]byte(a[24:28])),
	}, true
}

// arpRequest builds a broadcast "who has target, tell src" frame.
func arpRequest(mac net.HardwareAddr, src, target netip.Addr) []byte {
	f := make([]byte, 0, 42)
	f = append(f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff)
	f = append(f, mac...)
	f = append(f, 0x08, 0x06)                // ARP
	f = append(f, 0, 1, 0x08, 0, 6, 4, 0, 1) // Ethernet, IPv4, request
	f = append(f, mac...)
	f = append(f, src.AsSlice()...)
	f = append(f, 0, 0, 0, 0, 0, 0)
	return append(f, target.AsSlice()...)
}

// stage is one named span of a trace, from one stage time to another.
type stage struct {
	name     string
	from, to func(*svcTrace) time.Time
}

var (
	atSent    = func(s *svcTrace) time.Time { return s.sent }
	atCreated = func(s *svcTrace) time.Time { return s.created }
	atAdded   = func(s *svcTrace) time.Time { return s.added }
	atStatus  = func(s *svcTrace) time.Time { return s.status }
	atGARP    = func(s *svcTrace) time.Time { return s.garp }
	atARP     = func(s *svcTrace) time.Time { return s.arp }
	atRoute   = func(s *svcTrace) time.Time { return s.route }
)

// stages splits creation → ARP answer; each is measured only where both
// ends were seen.
var stages = []stage{
	{"create call (sent → returned)", atSent, atCreated},
	{"watch delivery (created → added)", atCreated, atAdded},
	{"controller (added → status)", atAdded, atStatus},
	{"agent (status → first GARP)", atStatus, atGARP},
	{"probe (first GARP → ARP answer)", atGARP, atARP},
	{"creation → status", atCreated, atStatus},
	{"creation → first GARP", atCreated, atGARP},
	{"creation → ARP answer", atCreated, atARP},
	{"create call sent → ARP answer", atSent, atARP},
	{"agent + router (status → route, all next hops)", atStatus, atRoute},
	{"creation → route at the router", atCreated, atRoute},
}

func span(s *svcTrace, st stage) (time.Duration, bool) {
	a, b := st.from(s), st.to(s)
	if a.IsZero() || b.IsZero() {
		return 0, false
	}
	return b.Sub(a), true
}

// report logs, for the sampled Services and for all of them, each stage's
// percentiles, the creation → GARP tail per quarter of the burst, and the
// worst traces stage by stage.
func (tr *tracer) report(t *testing.T, start time.Time) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if path := os.Getenv(envBenchTraceCSV); path != "" {
		tr.writeCSV(t, path, start)
	}
	sampled := tr.sampled
	t.Logf("BENCH trace: %d gratuitous ARP frames seen for bench addresses, %d frames dropped by the sniffer's socket", tr.garps, tr.drops)
	for _, set := range []struct {
		what string
		ss   []*svcTrace
	}{{"sampled", sampled}, {"all", tr.all}} {
		for _, st := range stages {
			var ds []time.Duration
			for _, s := range set.ss {
				if d, ok := span(s, st); ok {
					ds = append(ds, d)
				}
			}
			if len(ds) > 0 {
				t.Logf("BENCH trace %s: %-36s %s", set.what, st.name, percentiles(ds))
			}
		}
	}
	toGARP := stages[6]
	if tr.garps == 0 && len(tr.sampled) == 0 { // the BGP lab: no L2 stages
		toGARP = stages[len(stages)-1]
	}
	q := (len(tr.all) + 3) / 4
	for k := 0; k*q < len(tr.all); k++ {
		var ds []time.Duration
		for _, s := range tr.all[k*q : min(len(tr.all), (k+1)*q)] {
			if d, ok := span(s, toGARP); ok {
				ds = append(ds, d)
			}
		}
		t.Logf("BENCH trace all, quarter %d of the burst (Services %d-%d): %s %s", k+1, k*q, min(len(tr.all), (k+1)*q)-1, toGARP.name, percentiles(ds))
	}
	missing := 0
	for _, s := range tr.all {
		if toGARP.to(s).IsZero() || s.status.IsZero() {
			missing++
		}
	}
	t.Logf("BENCH trace: %d Services without a status or %s sighting", missing, toGARP.name)
	if len(sampled) > 0 {
		tr.logWorst(t, "sampled, by creation → ARP answer", sampled, stages[7], start)
	}
	tr.logWorst(t, "all, by "+toGARP.name, tr.all, toGARP, start)
}

// logWorst logs the 10 slowest traces by st, each stage in milliseconds.
func (tr *tracer) logWorst(t *testing.T, what string, ss []*svcTrace, st stage, start time.Time) {
	ss = slices.Clone(ss)
	slices.SortFunc(ss, func(a, b *svcTrace) int {
		da, _ := span(a, st)
		db, _ := span(b, st)
		return int(db - da)
	})
	t.Logf("BENCH trace worst (%s): ms per stage: create call | watch delivery | controller | agent | probe", what)
	for _, s := range ss[:min(10, len(ss))] {
		var parts []string
		for _, x := range stages[:5] {
			if d, ok := span(s, x); ok {
				parts = append(parts, strconv.FormatInt(d.Milliseconds(), 10))
			} else {
				parts = append(parts, "-")
			}
		}
		total, _ := span(s, st)
		t.Logf("BENCH trace worst: %s %s created at +%.1f s: %v = %s (status rv %s)", s.name, s.addr,
			s.created.Sub(start).Seconds(), total.Round(time.Millisecond), strings.Join(parts, " | "), s.statusRV)
	}
}

// loadSampler records the load average and the CPU pressure (PSI) while a
// run lasts.
type loadSampler struct {
	mu       sync.Mutex
	min, max float64
	psi0     float64 // /proc/pressure/cpu "some" total, µs
	start    time.Time
	stop     chan struct{}
	done     chan struct{}
}

func startLoadSampler() *loadSampler {
	l := &loadSampler{min: -1, psi0: cpuPressure(), start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		tick := time.NewTicker(2 * time.Second)
		defer tick.Stop()
		for {
			l.sample()
			select {
			case <-l.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return l
}

func (l *loadSampler) sample() {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return
	}
	v, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		return
	}
	l.mu.Lock()
	if l.min < 0 || v < l.min {
		l.min = v
	}
	l.max = max(l.max, v)
	l.mu.Unlock()
}

// finish stops sampling and describes the run's load.
func (l *loadSampler) finish() string {
	close(l.stop)
	<-l.done
	wall := time.Since(l.start).Seconds()
	psi := (cpuPressure() - l.psi0) / 1e6
	return fmt.Sprintf("load average (1 min) %.1f–%.1f; some task waited for a CPU %.0f %% of the time (PSI cpu some)", l.min, l.max, 100*psi/wall)
}

// cpuPressure is /proc/pressure/cpu's "some" total in µs (0 without PSI).
func cpuPressure() float64 {
	b, err := os.ReadFile("/proc/pressure/cpu")
	if err != nil {
		return 0
	}
	for _, f := range strings.Fields(strings.SplitN(string(b), "\n", 2)[0]) {
		if v, ok := strings.CutPrefix(f, "total="); ok {
			x, _ := strconv.ParseFloat(v, 64)
			return x
		}
	}
	return 0
}

// histogram is a Prometheus histogram's cumulative buckets (upper bound →
// count), summed over the series a scrape matched.
type histogram map[float64]float64

// fetchFrom GETs url from inside h (a component's /metrics on loopback).
func fetchFrom(h *netlab.Host, url string) ([]byte, error) {
	cl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := h.Do(func() error {
				var err error
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}
	resp, err := cl.Get(url)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// parseHistogram reads metric's buckets from a /metrics page, summed over
// the series whose labels contain every string of match.
func parseHistogram(page []byte, metric string, match []string) histogram {
	out := histogram{}
	for line := range strings.Lines(string(page)) {
		line = strings.TrimSpace(line)
		if !strings.HasPrefix(line, metric+"_bucket{") ||
			slices.ContainsFunc(match, func(m string) bool { return !strings.Contains(line, m) }) {
			continue
		}
		i := strings.Index(line, `le="`)
		if i < 0 {
			continue
		}
		le := line[i+4:]
		le = le[:strings.IndexByte(le, '"')]
		bound, err := strconv.ParseFloat(le, 64)
		if err != nil {
			bound = 1e308 // +Inf
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		out[bound] += v
	}
	return out
}

// since describes after − before: the count, the smallest bucket bounds
// holding 50 % and 99 %, and how many lay above the first bounds ≥ 0.1 s
// and ≥ 1 s.
func (after histogram) since(before histogram) string {
	bounds := slices.Sorted(func(yield func(float64) bool) {
		for b := range after {
			if !yield(b) {
				return
			}
		}
	})
	if len(bounds) == 0 {
		return "no samples"
	}
	total := after[bounds[len(bounds)-1]] - before[bounds[len(bounds)-1]]
	if total == 0 {
		return "no samples"
	}
	at := func(p float64) string {
		for _, b := range bounds {
			if after[b]-before[b] >= p*total {
				if b > 1e300 {
					return "+Inf"
				}
				return strconv.FormatFloat(b, 'g', 3, 64) + " s"
			}
		}
		return "?"
	}
	above := func(limit float64) string {
		for _, b := range bounds {
			if b >= limit {
				return fmt.Sprintf("%.0f above %g s", total-(after[b]-before[b]), b)
			}
		}
		return ""
	}
	return fmt.Sprintf("%.0f observations, p50 ≤ %s, p99 ≤ %s, %s, %s", total, at(0.5), at(0.99), above(0.1), above(1))
}

// waitAnswers waits until every sampled address answered, at most d, and
// returns how many did not.
func (tr *tracer) waitAnswers(d time.Duration) int {
	deadline := time.Now().Add(d)
	for {
		tr.mu.Lock()
		left := 0
		for _, s := range tr.sampled {
			if s.arp.IsZero() {
				left++
			}
		}
		tr.mu.Unlock()
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestBenchARPFrames: the tracer's request is a well-formed ARP request
// that its own parser reads back, and a gratuitous frame is told from an
// answer.
func TestBenchARPFrames(t *testing.T) {
	mac := net.HardwareAddr{2, 0, 0, 0, 0, 9}
	src, dst := netip.MustParseAddr("10.213.0.9"), netip.MustParseAddr("10.100.0.1")
	req := arpRequest(mac, src, dst)
	f, ok := parseARP(req)
	if len(req) != 42 || !ok || f.reply || f.spa != src || f.tpa != dst || !bytes.Equal(req[6:12], mac) {
		t.Fatalf("request %x parsed as %+v, %v", req, f, ok)
	}
	// The answer: op 2, sender dst at the owner's MAC, target us.
	owner := net.HardwareAddr{2, 0, 0, 0, 0, 1}
	ans := slices.Concat(mac, owner, []byte{0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 2}, owner, dst.AsSlice(), mac, src.AsSlice())
	if f, ok := parseARP(ans); !ok || !f.reply || f.spa != dst || f.tpa != src || !bytes.Equal(f.tha, mac) {
		t.Fatalf("answer parsed as %+v, %v", f, ok)
	}
	garp := slices.Concat([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, owner, []byte{0x08, 0x06, 0, 1, 0x08, 0, 6, 4, 0, 1}, owner, dst.AsSlice(), []byte{0, 0, 0, 0, 0, 0}, dst.AsSlice())
	if f, ok := parseARP(garp); !ok || f.spa != f.tpa || f.spa != dst {
		t.Fatalf("gratuitous frame parsed as %+v, %v", f, ok)
	}
	if _, ok := parseARP(req[:41]); ok {
		t.Error("a short frame parsed")
	}
}

// envBenchTraceCSV names a file TestBenchLabServices writes every
// Service's trace to: name, address, then each stamp in seconds since the
// burst started (empty when not seen), for looking at one run's stamps
// beyond the percentiles.
const envBenchTraceCSV = "MOORING_LAB_BENCH_TRACE_CSV"

// writeCSV writes the traces to path; called with mu held.
func (tr *tracer) writeCSV(t *testing.T, path string, start time.Time) {
	var b strings.Builder
	b.WriteString("name,address,sent,created,added,status,garp,arp,route\n")
	at := func(ts time.Time) string {
		if ts.IsZero() {
			return ""
		}
		return strconv.FormatFloat(ts.Sub(start).Seconds(), 'f', 4, 64)
	}
	for _, s := range tr.all {
		fmt.Fprintf(&b, "%s,%s,%s,%s,%s,%s,%s,%s,%s\n", s.name, s.addr, at(s.sent), at(s.created), at(s.added),
			at(s.status), at(s.garp), at(s.arp), at(s.route))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Errorf("writing %s: %v", path, err)
	}
}
