package bgpspeaker_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/netlab"
)

// This file runs FRR (Debian's frr package: zebra, bgpd, bfdd) as the
// router of a test, in a namespace of the test's lab. It is the minimal
// helper this package needs until the lab's own FRR helper lands; every
// daemon runs in the foreground under the lab host (killed with the test).

const frrDir = "/usr/lib/frr"

// frrRouter is one FRR instance.
type frrRouter struct {
	t     testing.TB
	host  *netlab.Host
	space string // FRR pathspace (-N): sockets under /var/run/frr/<space>
	dir   string
	procs []*netlab.Process
}

var frrSeq atomic.Int32

// requireFRR skips without FRR (fails under CI=true: `make deps` installs it).
func requireFRR(t testing.TB) {
	t.Helper()
	_, err := os.Stat(filepath.Join(frrDir, "bgpd"))
	if err == nil {
		_, err = user.Lookup("frr")
	}
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true but FRR is missing (apt-get install frr; make deps installs it): %v", err)
		}
		t.Skipf("FRR is not installed: %v", err)
	}
}

// startFRR writes conf as frr.conf and starts zebra, bgpd and bfdd in host.
func startFRR(t testing.TB, host *netlab.Host, conf string) *frrRouter {
	t.Helper()
	requireFRR(t)
	// FRR drops to the frr user: its folder must be reachable by it, which
	// t.TempDir's (0700 parents) is not.
	dir, err := os.MkdirTemp("", "mooring-frr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	r := &frrRouter{t: t, host: host, space: fmt.Sprintf("mbgp%d-%d", os.Getpid(), frrSeq.Add(1)), dir: dir}
	run := filepath.Join("/var/run/frr", r.space)
	u, err := user.Lookup("frr")
	if err != nil {
		t.Fatal(err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	for _, d := range []string{run, r.dir} {
		if err := os.MkdirAll(d, 0o755); err != nil || os.Chmod(d, 0o755) != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { os.RemoveAll(run) })
	conf = fmt.Sprintf("log file %s debugging\n", filepath.Join(r.dir, "frr.log")) + conf
	if err := os.WriteFile(filepath.Join(r.dir, "frr.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"zebra", "bgpd", "bfdd"} {
		r.start(d)
		if d == "zebra" {
			r.waitSocket("zserv.api")
		}
	}
	r.waitSocket("bgpd.vty")
	t.Cleanup(func() {
		for _, p := range r.procs {
			_ = p.Kill()
			_ = p.Wait()
		}
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(r.dir, "frr.log"))
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("FRR log tail:\n%s", b)
		}
	})
	return r
}

func (r *frrRouter) start(daemon string) {
	r.t.Helper()
	out, err := os.Create(filepath.Join(r.dir, daemon+".out"))
	if err != nil {
		r.t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command(filepath.Join(frrDir, daemon), "-N", r.space, "-f", filepath.Join(r.dir, "frr.conf"),
		"-i", filepath.Join(r.dir, daemon+".pid"))
	cmd.Stdout, cmd.Stderr = out, out
	p, err := r.host.Start(cmd)
	if err != nil {
		r.t.Fatal(err)
	}
	r.procs = append(r.procs, p)
}

func (r *frrRouter) waitSocket(name string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(filepath.Join("/var/run/frr", r.space, name)); err == nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	var outs []string
	for _, d := range []string{"zebra", "bgpd", "bfdd"} {
		b, _ := os.ReadFile(filepath.Join(r.dir, d+".out"))
		outs = append(outs, d+": "+string(b))
	}
	r.t.Fatalf("FRR did not create %s within 10 s:\n%s", name, strings.Join(outs, "\n"))
}

// vtysh runs one command and returns its output.
func (r *frrRouter) vtysh(cmds ...string) (string, error) {
	args := []string{"-N", r.space}
	for _, c := range cmds {
		args = append(args, "-c", c)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "vtysh", args...).Output()
	return string(out), err
}

// json runs a "show ... json" command into v.
func (r *frrRouter) json(cmd string, v any) error {
	out, err := r.vtysh(cmd)
	if err != nil {
		return fmt.Errorf("vtysh %q: %w", cmd, err)
	}
	if i := strings.IndexByte(out, '{'); i > 0 {
		out = out[i:]
	}
	return json.Unmarshal([]byte(out), v)
}

// frrPath is one path of a prefix in FRR's BGP table.
type frrPath struct {
	Valid    bool `json:"valid"`
	Stale    bool `json:"stale"`
	Nexthops []struct {
		IP    string `json:"ip"`
		Scope string `json:"scope"`
	} `json:"nexthops"`
	Peer struct {
		PeerID string `json:"peerId"`
	} `json:"peer"`
	Community *struct {
		String string `json:"string"`
	} `json:"community"`
	LargeCommunity *struct {
		String string `json:"string"`
	} `json:"largeCommunity"`
	LocPrf int `json:"locPrf"`
}

// paths returns the paths FRR holds for prefix ("" family picks by prefix).
func (r *frrRouter) paths(prefix string) ([]frrPath, error) {
	afi := "ipv4"
	if strings.Contains(prefix, ":") {
		afi = "ipv6"
	}
	var out struct {
		Paths []frrPath `json:"paths"`
	}
	if err := r.json(fmt.Sprintf("show bgp %s unicast %s json", afi, prefix), &out); err != nil {
		return nil, err
	}
	return out.Paths, nil
}

// nextHops lists the global next hops of a prefix's valid paths, sorted.
func (r *frrRouter) nextHops(prefix string) []string {
	ps, err := r.paths(prefix)
	if err != nil {
		r.t.Logf("reading %s: %v", prefix, err)
		return nil
	}
	var out []string
	for _, p := range ps {
		if !p.Valid {
			continue
		}
		for _, nh := range p.Nexthops {
			if nh.Scope == "" || nh.Scope == "global" {
				out = append(out, nh.IP)
			}
		}
	}
	return slices.Compact(sortedStrings(out))
}

// frrNeighbor is FRR's view of one session.
type frrNeighbor struct {
	State          string `json:"bgpState"`
	UpMsec         int64  `json:"bgpTimerUpMsec"`
	EstablishedAt  int64  `json:"bgpTimerUpEstablishedEpoch"`
	EstablishedCnt int    `json:"connectionsEstablished"`
	DroppedCnt     int    `json:"connectionsDropped"`
	LastReset      string `json:"lastResetDueTo"`
	MessageStats   struct {
		NotificationsRecv int `json:"notificationsRecv"`
		NotificationsSent int `json:"notificationsSent"`
		TotalRecv         int `json:"totalRecv"`
	} `json:"messageStats"`
	GR struct {
		RemoteGrMode string `json:"remoteGrMode"`
	} `json:"gracefulRestartInfo"`
}

// neighbors returns FRR's sessions by neighbor address.
func (r *frrRouter) neighbors() (map[string]frrNeighbor, error) {
	out := map[string]frrNeighbor{}
	err := r.json("show bgp neighbors json", &out)
	return out, err
}

func sortedStrings(s []string) []string {
	out := slices.Clone(s)
	slices.Sort(out)
	return out
}
