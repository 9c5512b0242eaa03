package lab_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/cli"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// envSelf makes this test binary behave as the mooring executable: the lab
// runs it as the kubelet stand-in, the echo pods, the controller and the
// agents, so the test needs no prior `make build`.
const envSelf = "MOORING_LAB_TEST_SELF"

func TestMain(m *testing.M) {
	if os.Getenv(envSelf) == "1" {
		os.Exit(runAsMooring())
	}
	os.Exit(m.Run())
}

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

func runAsMooring() int {
	ctx, stop := signalContext()
	defer stop()
	return cli.Run(ctx, os.Args[1:], cli.Streams{In: os.Stdin, Out: os.Stdout, Err: os.Stderr})
}

// requireLab skips unless the machine can run the lab; under CI=true a
// missing piece fails instead, because CI installs and builds all of them.
func requireLab(t *testing.T) (kubebin, crds string) {
	t.Helper()
	netlab.RequirePrivileges(t)
	kubebin, crds = lab.FindKubeBin(), lab.FindCRDDir("")
	var missing []string
	if kubebin == "" {
		missing = append(missing, "control-plane binaries (`make kubebin`, or set "+lab.EnvKubeBin+")")
	}
	if crds == "" {
		missing = append(missing, "config/crd")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		missing = append(missing, "nft (`make deps`), which kube-proxy's nftables mode runs")
	}
	if len(missing) > 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab prerequisites missing: %s", strings.Join(missing, "; "))
		}
		t.Skipf("lab prerequisites missing: %s", strings.Join(missing, "; "))
	}
	return kubebin, crds
}

// TestLabEndToEnd brings the whole lab up, reaches the echo pods by pod IP,
// through kube-proxy by ClusterIP and, with Mooring, through the
// LoadBalancer address from the client; measures one hard failover of the
// announcing node with `mooring failover`'s code and restores the node; then
// shuts down and checks that nothing is left: no process, no state dir.
func TestLabEndToEnd(t *testing.T) {
	kubebin, crds := requireLab(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "lab")
	logs := filepath.Join(t.TempDir(), "logs")
	defer func() {
		if t.Failed() {
			dumpLogProblems(t, logs)
		}
	}()
	cfg := lab.Config{
		Nodes: 3, StateDir: dir, KubeBin: kubebin, CRDDir: crds,
		Self: self, SelfEnv: []string{envSelf + "=1"}, Mooring: true,
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 90 * time.Second,
		KeepLogs: logs,
		Log:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})),
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	readyc := make(chan *lab.Ready, 1)
	errc := make(chan error, 1)
	go func() { errc <- lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r }) }()

	var r *lab.Ready
	select {
	case r = <-readyc:
	case err := <-errc:
		t.Fatalf("lab.Run returned before ready: %v", err)
	case <-time.After(2 * time.Minute):
		t.Fatal("lab not ready after 2 minutes")
	}
	t.Logf("lab ready in %v; Service %+v; try %s from %s", r.Elapsed.Round(time.Millisecond), r.Service, r.URL, r.From)

	stopped := false
	defer func() {
		if !stopped {
			cancel()
			<-errc
		}
	}()
	t.Run("state", func(t *testing.T) { checkState(t, dir) })
	t.Run("exec", func(t *testing.T) { checkExec(t, self, dir) })
	t.Run("pod IPs", func(t *testing.T) { checkPodIPs(t, r) })
	t.Run("ClusterIP", func(t *testing.T) { checkClusterIP(t, r) })
	t.Run("LoadBalancer", func(t *testing.T) { checkLoadBalancer(t, r) })
	t.Run("kubectl", func(t *testing.T) { checkKubectl(t, r) })
	t.Run("status now", func(t *testing.T) { checkStatusNow(t, self, dir) })
	t.Run("foreign pods left alone", func(t *testing.T) { checkForeignPodsLeftAlone(t, r.Kubeconfig) })
	t.Run("scheduler", func(t *testing.T) { checkScheduled(t, kubebin, r.Kubeconfig) })
	// Users' processes in the two announcing nodes: one of them is killed.
	fs := []*foreign{startForeign(t, self, dir, "node-1"), startForeign(t, self, dir, "node-2")}
	restarted := 0
	t.Run("failover", func(t *testing.T) { checkFailover(t, r, fs, &restarted) })
	t.Run("failover --help example", func(t *testing.T) { checkFailoverHelpExample(t, self, dir) })

	cancel()
	select {
	case err := <-errc:
		stopped = true
		if err != nil {
			t.Errorf("lab.Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("lab did not stop within 30s")
	}
	checkNothingLeft(t, dir)
	// The lab also ends what users started in it.
	for _, f := range fs {
		select {
		case <-f.done:
		case <-time.After(5 * time.Second):
			t.Errorf("the user's process in %s survived the lab", f.node)
		}
	}
	if restarted != 0 && alive(restarted) {
		t.Errorf("the command restarted by lab restore (pid %d) survived the lab", restarted)
	}
}

func checkState(t *testing.T, dir string) {
	h, err := lab.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !h.State.Ready || h.State.Service == nil || len(h.State.Hosts) != 5 {
		t.Fatalf("state = %+v, want ready with a service and 5 hosts", h.State)
	}
	if _, err := os.Stat(h.State.Kubeconfig); err != nil {
		t.Fatal(err)
	}
}

// checkExec runs `mooring lab exec client -- cat /proc/net/fib_trie` as
// another process and finds the client's address in what it printed.
func checkExec(t *testing.T, self, dir string) {
	cmd := exec.Command(self, "lab", "--state-dir", dir, "exec", "client", "--", "cat", "/proc/net/fib_trie")
	cmd.Env = append(os.Environ(), envSelf+"=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("lab exec: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("10.213.0.250")) {
		t.Fatalf("lab exec client did not run in the client namespace:\n%s", out)
	}
}

// get sends one request from host and returns the body.
func get(t *testing.T, r *lab.Ready, host, url string) string {
	t.Helper()
	// A few tries within 10 s: the first SYN may race an ARP/NDP exchange,
	// and a restored node's kube-proxy needs a moment.
	deadline := time.Now().Add(10 * time.Second)
	var body string
	var err error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		body, err = lab.HTTPGet(ctx, r.Cluster.Host(host), url, time.Second)
		cancel()
		if err == nil {
			return body
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("GET %s from %s: %v", url, host, err)
	return ""
}

func checkPodIPs(t *testing.T, r *lab.Ready) {
	for i, want := range []string{"node=node-1", "node=node-2"} {
		url := fmt.Sprintf("http://10.244.%d.2:%d/", i+1, lab.EchoPort)
		if body := get(t, r, "node-3", url); !strings.Contains(body, want) {
			t.Errorf("%s answered %q, want %s", url, body, want)
		}
		url6 := fmt.Sprintf("http://[fd00:244:0:%d::2]:%d/", i+1, lab.EchoPort)
		if body := get(t, r, "node-3", url6); !strings.Contains(body, want) {
			t.Errorf("%s answered %q, want %s", url6, body, want)
		}
	}
}

func checkClusterIP(t *testing.T, r *lab.Ready) {
	if len(r.Service.ClusterIP) != 2 {
		t.Fatalf("ClusterIPs = %v, want one per family", r.Service.ClusterIP)
	}
	for _, ip := range r.Service.ClusterIP {
		url := "http://" + netip.AddrPortFrom(netip.MustParseAddr(ip), lab.DemoPort).String() + "/"
		if body := get(t, r, "node-3", url); !strings.Contains(body, "pod=default/echo-") {
			t.Errorf("%s answered %q", url, body)
		}
	}
}

// checkLoadBalancer reaches both backends through each LoadBalancer
// address from the client and checks that exactly one node answers ARP for
// the first one (FIELD-NOTES §2: before any handover, find every responder).
// The failover subtest then kills that node.
func checkLoadBalancer(t *testing.T, r *lab.Ready) {
	if len(r.Service.Ingress) == 0 {
		t.Fatal("the Service has no LoadBalancer address: the Mooring controller did not assign one")
	}
	// The lab is ready once both pods answer through the first address;
	// kube-proxy programs each family's endpoints in its own sync (at most
	// one a second), so the other family may still lead to one pod for a
	// moment: each address gets up to 10 s.
	for _, ip := range r.Service.Ingress {
		url := "http://" + netip.AddrPortFrom(netip.MustParseAddr(ip), lab.DemoPort).String() + "/"
		seen := map[string]bool{}
		requests := 0
		for deadline := time.Now().Add(10 * time.Second); len(seen) < 2 && time.Now().Before(deadline); requests++ {
			body := get(t, r, "client", url)
			seen[strings.Fields(body)[0]] = true
			if requests >= 40 {
				time.Sleep(100 * time.Millisecond)
			}
		}
		if len(seen) < 2 {
			t.Errorf("%s: only %v answered in %d requests over 10 s, want both pods", url, seen, requests)
		}
	}
	vip := netip.MustParseAddr(r.Service.Ingress[0])
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	macs, err := netlab.Probe(ctx, r.Cluster.Host("client"), vip, 300*time.Millisecond)
	if err != nil || len(macs) != 1 {
		t.Fatalf("ARP responders for %s: %v (%v), want exactly one", vip, macs, err)
	}
	if labNodeMACs(r).Node(macs[0]) == "" {
		t.Fatalf("%s is answered by %s, which is no node", vip, macs[0])
	}
}

// checkNothingLeft fails if the state dir or any process the lab started
// survived: every process it ran carries the state dir on its command line
// or envSelf in its environment.
func checkNothingLeft(t *testing.T, dir string) {
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("state dir %s still exists (%v)", dir, err)
	}
	me := os.Getpid()
	// Only this test binary's children count: another run of these tests
	// on the same machine (its own binary, its own state dir) is not ours.
	self, _ := os.Readlink("/proc/self/exe")
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == me {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		environ, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
		exe, _ := os.Readlink(filepath.Join("/proc", e.Name(), "exe"))
		ours := bytes.Contains(environ, []byte(envSelf+"=1")) && (self == "" || exe == self)
		if bytes.Contains(cmdline, []byte(dir)) || ours {
			t.Errorf("process %d survived the lab: %s", pid, bytes.ReplaceAll(cmdline, []byte{0}, []byte{' '}))
		}
	}
}

// dumpLogProblems prints the warnings and errors of every component's log
// (the lab copied them out before removing its state dir).
func dumpLogProblems(t *testing.T, logs string) {
	files, _ := filepath.Glob(filepath.Join(logs, "*.log"))
	for _, f := range files {
		b, _ := os.ReadFile(f)
		var bad []string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") || strings.HasPrefix(l, "E1") || strings.HasPrefix(l, "F1") {
				bad = append(bad, l)
			}
		}
		if len(bad) > 20 {
			bad = bad[len(bad)-20:]
		}
		if len(bad) > 0 {
			t.Logf("%s:\n%s", filepath.Base(f), strings.Join(bad, "\n"))
		}
	}
}
