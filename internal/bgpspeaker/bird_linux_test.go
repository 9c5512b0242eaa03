package bgpspeaker_test

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

// Debian's bird2 as the router in a lab host's namespace: the second
// implementation the speaker is proven against (FRR is the first). The
// test writes BIRD's configuration into t.TempDir(), runs `bird -f` there
// as the host's process (it dies with the test) and reads BIRD back
// through its control socket with birdc, which needs no namespace.

const (
	birdPath  = "/usr/sbin/bird"
	birdcPath = "/usr/sbin/birdc"
)

// requireBird skips t unless bird2 is installed; under CI=true, where
// `make deps` installs it, a missing bird2 fails t instead.
func requireBird(t testing.TB) {
	t.Helper()
	for _, p := range []string{birdPath, birdcPath} {
		if _, err := os.Stat(p); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("CI=true but bird2 is not installed (%v): run `make deps`", err)
			}
			t.Skipf("skipping: bird2 is not installed (%v): `make deps` installs it", err)
		}
	}
}

// birdNeighbor is one `protocol bgp`: one session with one node address.
type birdNeighbor struct {
	Name     string // the protocol's name, also in `show route`
	Addr     netip.Addr
	ASN      uint32
	Families []string // BIRD channel names: "ipv4", "ipv6"
	Password string
	BFD      bool
	// GracefulRestart is BIRD's "graceful restart" setting, "" for
	// "aware" (BIRD's default: the helper role only).
	GracefulRestart string
	// Flood exports the config's Flood4 routes to this neighbour.
	Flood bool
}

// birdConfig is the router's whole configuration.
type birdConfig struct {
	RouterID  netip.Addr
	ASN       uint32
	Neighbors []birdNeighbor
	// BFDInterval and BFDMultiplier configure `protocol bfd` (0: none).
	BFDInterval   time.Duration
	BFDMultiplier int
	// Flood4 is a number of blackhole /32s from 10.200.0.0 up (protocol
	// static flood4) that Flood neighbours are sent, as by a router that
	// sends the nodes its table.
	Flood4 int
}

// text renders the configuration, logging everything to logPath. Every
// session is passive (the speaker connects; it does not listen), takes
// the 9/3 s timers Mooring defaults to, is a graceful-restart helper
// ("aware", BIRD's default, written out) and imports everything: BIRD
// keeps what it learns in its master4/master6 tables, which the test reads.
func (c birdConfig) text(logPath string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Written by Mooring's BGP interop test (internal/bgpspeaker).\n")
	fmt.Fprintf(&b, "log %q all;\n", logPath)
	fmt.Fprintf(&b, "router id %s;\n", c.RouterID)
	// device: BIRD learns interfaces and addresses from it; without it a
	// neighbour is never "on link" and no session starts.
	fmt.Fprintf(&b, "protocol device { scan time 10; }\n")
	if c.BFDInterval > 0 {
		ms := c.BFDInterval.Milliseconds()
		fmt.Fprintf(&b, "protocol bfd {\n  interface \"*\" {\n    min rx interval %d ms;\n    min tx interval %d ms;\n    multiplier %d;\n  };\n}\n",
			ms, ms, c.BFDMultiplier)
	}
	if c.Flood4 > 0 {
		fmt.Fprintf(&b, "protocol static flood4 {\n  ipv4;\n")
		base := netip.MustParseAddr("10.200.0.0").As4()
		first := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		for i := range uint32(c.Flood4) {
			a := first + i
			fmt.Fprintf(&b, "  route %d.%d.%d.%d/32 blackhole;\n", a>>24, a>>16&0xff, a>>8&0xff, a&0xff)
		}
		fmt.Fprintf(&b, "}\n")
	}
	for _, n := range c.Neighbors {
		fmt.Fprintf(&b, "protocol bgp %s {\n", n.Name)
		fmt.Fprintf(&b, "  local as %d;\n  neighbor %s as %d;\n", c.ASN, n.Addr, n.ASN)
		gr := cmp.Or(n.GracefulRestart, "aware")
		fmt.Fprintf(&b, "  passive on;\n  hold time 9;\n  keepalive time 3;\n  graceful restart %s;\n", gr)
		// The log the tests read: state changes ("State changed to up"),
		// events ("Neighbor graceful restart detected"/"done") and
		// packets ("Got END-OF-RIB").
		fmt.Fprintf(&b, "  debug { states, events, packets };\n")
		if n.Password != "" {
			fmt.Fprintf(&b, "  password %q;\n", n.Password)
		}
		if n.BFD {
			fmt.Fprintf(&b, "  bfd on;\n")
		}
		for _, fam := range n.Families {
			export := "none"
			if n.Flood && fam == "ipv4" {
				export = `where proto = "flood4"`
			}
			fmt.Fprintf(&b, "  %s { import all; export %s; };\n", fam, export)
		}
		fmt.Fprintf(&b, "}\n")
	}
	return b.String()
}

// birdRouter is a running bird.
type birdRouter struct {
	t                    testing.TB
	host                 *netlab.Host
	cfg, sock, pid, logf string
	proc                 *netlab.Process
}

// startBird writes cfg and starts bird in host; it returns once bird
// answers on its control socket, and kills it in t.Cleanup (printing its
// log first when t failed).
func startBird(t testing.TB, host *netlab.Host, cfg birdConfig) *birdRouter {
	t.Helper()
	requireBird(t)
	dir := t.TempDir()
	r := &birdRouter{t: t, host: host, cfg: filepath.Join(dir, "bird.conf"), sock: filepath.Join(dir, "bird.ctl"),
		pid: filepath.Join(dir, "bird.pid"), logf: filepath.Join(dir, "bird.log")}
	if err := os.WriteFile(r.cfg, []byte(cfg.text(r.logf)), 0o600); err != nil {
		t.Fatal(err)
	}
	// -f: stay in the foreground, so the lab owns the process (a daemon
	// would leave the process group and outlive the test).
	cmd := exec.Command(birdPath, "-f", "-c", r.cfg, "-s", r.sock, "-P", r.pid)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := host.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	r.proc = p
	t.Cleanup(func() {
		if t.Failed() {
			for _, q := range []string{"show protocols all", "show route all", "show bfd sessions"} {
				o, _ := r.birdc(q)
				t.Logf("bird: %s:\n%s", q, o)
			}
			t.Logf("bird log tail:\n%s", r.logTail(4000))
		}
		_ = p.Kill()
		_ = p.Wait()
	})
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-p.Done():
			t.Fatalf("bird exited at start: %v\n%s\nconfig:\n%s", p.Wait(), out.String(), cfg.text(r.logf))
		default:
		}
		if o, err := r.birdc("show status"); err == nil && strings.Contains(o, "Daemon is up and running") {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("bird did not answer on %s within 10 s:\n%s", r.sock, out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// birdc runs one command on bird's control socket.
func (r *birdRouter) birdc(query string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, birdcPath, append([]string{"-s", r.sock}, strings.Fields(query)...)...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("birdc %s: %w: %s", query, err, out)
	}
	return string(out), nil
}

func (r *birdRouter) logTail(n int) string {
	b, _ := os.ReadFile(r.logf)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// log returns bird's whole log.
func (r *birdRouter) log() string {
	b, _ := os.ReadFile(r.logf)
	return string(b)
}

// dropBFD makes the router's namespace drop (on) or pass (off) the BFD
// control packets it sends (UDP to port 3784, RFC 5881): the node's BFD
// then hears nothing while BGP's keepalives still flow.
func (r *birdRouter) dropBFD(on bool) error {
	script := "table inet mooring_bfd_test {\n chain out {\n  type filter hook output priority 0;\n  udp dport 3784 drop\n }\n}\n"
	if !on {
		script = "delete table inet mooring_bfd_test\n"
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	p, err := r.host.Start(cmd)
	if err != nil {
		return err
	}
	if err := p.Wait(); err != nil {
		return fmt.Errorf("nft in %s: %w: %s", r.host.Name, err, out.String())
	}
	return nil
}

// birdProtocol is what `show protocols all <name>` says about a session.
type birdProtocol struct {
	State    string // the protocol's: up, start, ...
	Info     string // e.g. "Established", "Passive", "Active"
	BGPState string // "BGP state:" line
	Text     string
}

var protoLine = regexp.MustCompile(`^(\S+)\s+BGP\s+\S+\s+(\S+)\s+\S+\s*(.*)$`)

// protocol reads one BGP protocol's state.
func (r *birdRouter) protocol(name string) (birdProtocol, error) {
	out, err := r.birdc("show protocols all " + name)
	if err != nil {
		return birdProtocol{}, err
	}
	p := birdProtocol{Text: out}
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if m := protoLine.FindStringSubmatch(line); m != nil && m[1] == name {
			p.State = m[2]
			// Info follows the "since" time, which may be two fields.
			p.Info = strings.TrimSpace(m[3])
		}
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "BGP state:"); ok {
			p.BGPState = strings.TrimSpace(v)
		}
	}
	if p.State == "" {
		return p, fmt.Errorf("no protocol %s in:\n%s", name, out)
	}
	return p, nil
}

// birdRoute is one route of `show route <prefix> all`.
type birdRoute struct {
	Proto string
	// Since is when BIRD imported the route (its clock, "12:03:52.765"):
	// a route kept through a restart keeps it.
	Since   string
	Primary bool
	// Flags is what follows the preference in "(100s)". BIRD 2.0.12's
	// "s" marks only long-lived graceful restart's stale routes (the
	// LLGR_STALE community), not routes kept during a plain graceful
	// restart: those show no mark at all.
	Flags string
	Via   []netip.Addr // the resolved gateways ("via ... on eth0")
	// NextHops is the BGP.next_hop attribute as received: the global
	// address, then a link-local one if one came along.
	NextHops []netip.Addr
	Text     string
}

var routeHead = regexp.MustCompile(`^\S*\s+(?:unicast|unreachable|blackhole|prohibit)\s+\[(\S+)\s(\S+)[^\]]*\]\s*(\*?)\s*\((\d+)(\D*)\)`)

// routes reads every route BIRD has for prefix (all tables).
func (r *birdRouter) routes(prefix netip.Prefix) ([]birdRoute, error) {
	out, err := r.birdc("show route " + prefix.String() + " all")
	if err != nil && strings.Contains(out, "Network not found") {
		return nil, nil // birdc exits 1 for it
	}
	if err != nil {
		return nil, err
	}
	return parseBirdRoutes(out)
}

func parseBirdRoutes(out string) ([]birdRoute, error) {
	var rs []birdRoute
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\n")
		if m := routeHead.FindStringSubmatch(line); m != nil {
			rs = append(rs, birdRoute{Proto: m[1], Since: m[2], Primary: m[3] == "*", Flags: m[5]})
		}
		if len(rs) == 0 {
			continue
		}
		cur := &rs[len(rs)-1]
		cur.Text += line + "\n"
		f := strings.Fields(line)
		switch {
		case len(f) >= 2 && f[0] == "via":
			a, err := netip.ParseAddr(f[1])
			if err != nil {
				return nil, fmt.Errorf("bird route gateway %q: %w", line, err)
			}
			cur.Via = append(cur.Via, a)
		case len(f) >= 2 && f[0] == "BGP.next_hop:":
			for _, s := range f[1:] {
				a, err := netip.ParseAddr(s)
				if err != nil {
					return nil, fmt.Errorf("bird BGP.next_hop %q: %w", line, err)
				}
				cur.NextHops = append(cur.NextHops, a)
			}
		}
	}
	return rs, nil
}

// birdBFD is one line of `show bfd sessions`.
type birdBFD struct {
	Addr              netip.Addr
	State             string
	Interval, Timeout time.Duration
}

// bfdSessions reads BIRD's BFD sessions.
func (r *birdRouter) bfdSessions() ([]birdBFD, error) {
	out, err := r.birdc("show bfd sessions")
	if err != nil {
		return nil, err
	}
	var ss []birdBFD
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		a, err := netip.ParseAddr(f[0])
		if err != nil {
			continue
		}
		s := birdBFD{Addr: a, State: f[2]}
		// The last two fields are the interval and timeout in seconds.
		iv, err1 := strconv.ParseFloat(f[len(f)-2], 64)
		to, err2 := strconv.ParseFloat(f[len(f)-1], 64)
		if err := errors.Join(err1, err2); err != nil {
			return nil, fmt.Errorf("bird BFD line %q: %w", line, err)
		}
		s.Interval = time.Duration(iv * float64(time.Second)).Round(time.Millisecond)
		s.Timeout = time.Duration(to * float64(time.Second)).Round(time.Millisecond)
		ss = append(ss, s)
	}
	return ss, nil
}
