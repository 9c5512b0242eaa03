package cni_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"

	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/podipam"
)

// needRoot skips without root, except under CI=true where it fails.
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatal("this test needs root (network namespaces) and CI runs as root")
	}
	t.Skip("needs root: network namespaces")
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// pluginDir returns a folder holding mooring-ipam (built from this tree)
// and the reference plugins bridge, loopback, host-local (built by
// hack/cniplugins, or taken from $MOORING_CNIPLUGINS).
func pluginDir(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		ref := os.Getenv("MOORING_CNIPLUGINS")
		if ref == "" {
			out, err := exec.Command("../../hack/cniplugins/build.sh").Output()
			if err != nil {
				binErr = fmt.Errorf("hack/cniplugins/build.sh: %w", err)
				return
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			ref = lines[len(lines)-1]
		}
		binDir, binErr = os.MkdirTemp("", "mooring-cni-bin-")
		if binErr != nil {
			return
		}
		for _, p := range []string{"bridge", "loopback", "host-local", "ptp"} {
			if binErr = os.Symlink(filepath.Join(ref, p), filepath.Join(binDir, p)); binErr != nil {
				return
			}
		}
		// Static, as `make build` builds mooring-ipam; gohello is the
		// latency benchmark's floor for a Go program.
		for name, pkg := range map[string]string{"mooring-ipam": "../../cmd/mooring-ipam", "gohello": "./testdata/gohello"} {
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", filepath.Join(binDir, name), pkg)
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				binErr = fmt.Errorf("build %s: %v\n%s", name, err, out)
				return
			}
		}
	})
	if binErr != nil {
		t.Fatal(binErr)
	}
	return binDir
}

func TestMain(m *testing.M) {
	if dir := os.Getenv(agentEnv); dir != "" {
		os.Exit(runAgentProcess(dir))
	}
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// node is a network namespace standing in for a node: the container
// runtime's libcni calls run on threads inside it, so the plugins it
// executes (and the bridge they create) live there, never on the host.
type node struct {
	t     testing.TB
	ns    netns.NsHandle
	calls chan func()
	wg    sync.WaitGroup
	pods  []string
}

func newNode(t testing.TB, workers int) *node {
	n := &node{t: t, calls: make(chan func())}
	ready := make(chan error, 1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		ns, err := netns.New()
		if err == nil {
			n.ns = ns
			err = netlinkUp("lo")
		}
		ready <- err
		if err != nil {
			return
		}
		for f := range n.calls {
			f()
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("node namespace: %v", err)
	}
	for range workers - 1 {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			runtime.LockOSThread()
			if err := netns.Set(n.ns); err != nil {
				t.Errorf("join node namespace: %v", err)
				return
			}
			for f := range n.calls {
				f()
			}
		}()
	}
	t.Cleanup(n.close)
	return n
}

func netlinkUp(name string) error {
	l, err := netlink.LinkByName(name)
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(l)
}

// do runs fn on a thread inside the node.
func (n *node) do(fn func() error) error {
	done := make(chan error, 1)
	n.calls <- func() { done <- fn() }
	return <-done
}

// newPod creates a named network namespace for a pod and returns its path.
func (n *node) newPod(name string) string {
	n.t.Helper()
	full := fmt.Sprintf("mooring-cnitest-%d-%s", os.Getpid(), name)
	err := n.do(func() error {
		ns, err := netns.NewNamed(full) // switches this thread into it
		if err != nil {
			return err
		}
		ns.Close()
		if err := netlinkUp("lo"); err != nil {
			return err
		}
		return netns.Set(n.ns)
	})
	if err != nil {
		n.t.Fatalf("pod namespace %s: %v", full, err)
	}
	n.pods = append(n.pods, full)
	return "/var/run/netns/" + full
}

func (n *node) close() {
	close(n.calls)
	n.wg.Wait()
	for _, p := range n.pods {
		_ = netns.DeleteNamed(p)
	}
	n.ns.Close()
}

// agent is an ipamd with a file store, serving on a unix socket.
type agent struct {
	t      testing.TB
	dir    string
	sock   string
	store  *ipamd.FileStore
	alloc  *ipamd.Allocator
	cancel context.CancelFunc
	done   chan error
}

func pools() map[string]ipamd.Pool {
	return map[string]ipamd.Pool{"default": {
		Families: []podipam.Family{podipam.IPv4, podipam.IPv6},
		Blocks:   []netip.Prefix{netip.MustParsePrefix("10.244.7.0/24"), netip.MustParsePrefix("fd00:7::/120")},
	}}
}

func startAgent(t testing.TB, dir string, p map[string]ipamd.Pool) *agent {
	t.Helper()
	st, err := ipamd.OpenFileStore(filepath.Join(dir, "store"))
	if err != nil {
		t.Fatal(err)
	}
	al, err := ipamd.NewAllocator(st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if p != nil {
		al.SetPools(p)
	}
	ctx, cancel := context.WithCancel(context.Background())
	a := &agent{t: t, dir: dir, sock: filepath.Join(dir, "ipamd.sock"), store: st, alloc: al, cancel: cancel, done: make(chan error, 1)}
	srv := &ipamd.Server{Alloc: al, Socket: a.sock}
	go func() { a.done <- srv.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if c, err := net.Dial("unix", a.sock); err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("ipamd socket never came up")
		}
		time.Sleep(5 * time.Millisecond)
	}
	return a
}

func (a *agent) stop() {
	a.cancel()
	if err := <-a.done; err != nil {
		a.t.Errorf("ipamd: %v", err)
	}
	a.store.Close()
}

// runtimeConf is what a container runtime passes for one pod.
func runtimeConf(id, netnsPath string) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: id, NetNS: netnsPath, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", id}}}
}

func bridgeList(t testing.TB, sock, bridge string) *libcni.NetworkConfigList {
	t.Helper()
	return mustList(t, fmt.Sprintf(`{"cniVersion":"1.1.0","name":"mooring","plugins":[
		{"type":"bridge","bridge":%q,"isGateway":true,"ipam":{"type":"mooring-ipam","socket":%q}},
		{"type":"mooring-ipam","socket":%q}]}`, bridge, sock, sock))
}

func mustList(t testing.TB, s string) *libcni.NetworkConfigList {
	t.Helper()
	l, err := libcni.ConfListFromBytes([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// ping sends one ICMP echo from inside the pod namespace at path and waits
// for the reply.
func ping(t testing.TB, podPath string, to netip.Addr) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // the thread enters the pod and dies with this goroutine
		ns, err := netns.GetFromPath(podPath)
		if err != nil {
			errc <- err
			return
		}
		defer ns.Close()
		if err := netns.Set(ns); err != nil {
			errc <- err
			return
		}
		c, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		msg, _ := (&icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 7, Seq: 1, Data: []byte("mooring")}}).Marshal(nil)
		buf := make([]byte, 1500)
		for try := range 20 {
			_ = try
			if _, err := c.WriteTo(msg, &net.IPAddr{IP: to.AsSlice()}); err != nil {
				errc <- err
				return
			}
			_ = c.SetReadDeadline(time.Now().Add(250 * time.Millisecond))
			n, peer, err := c.ReadFrom(buf)
			if err != nil {
				continue
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err == nil && m.Type == ipv4.ICMPTypeEchoReply && peer.String() == to.String() {
				errc <- nil
				return
			}
		}
		errc <- fmt.Errorf("no echo reply from %s", to)
	}()
	return <-errc
}
