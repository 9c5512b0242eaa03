package podipamctl_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/ipamd"
	"github.com/mooringlb/mooring/internal/netlab"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestAgentMemory measures a real `mooring agent` process (in a netlab
// node namespace, against the real apiserver) with N LoadBalancer Services
// that all have an address and an L2 policy announcing them, and 110 pods
// on its node: first with pod IPAM on (cluster-pool, 110 allocations made
// through ipamd's socket), then restarted with pod IPAM off. It reads
// VmRSS from /proc every second for a window; the difference between the
// runs is pod IPAM's share. GOMEMLIMIT is the DaemonSet's (48MiB).
// Skipped unless MOORING_AGENTMEM_SERVICES=<n> (10000 for docs/benchmarks.md):
//
//	MOORING_AGENTMEM_SERVICES=10000 go test -count=1 -run TestAgentMemory -v -timeout 60m ./internal/podipamctl
func TestAgentMemory(t *testing.T) {
	nsvc, _ := strconv.Atoi(os.Getenv("MOORING_AGENTMEM_SERVICES"))
	if nsvc <= 0 {
		t.Skip("set MOORING_AGENTMEM_SERVICES=<services> to measure")
	}
	const pods = 110
	lab := netlab.NewForTest(t, netlab.Config{Nodes: 1})
	h := lab.Nodes()[0]
	bin := buildMooring(t)
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	relayAPI(t, h, e.Config.Host)

	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: h.Name}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: h.Addr4.String()}}
	node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}
	if err := c.Status().Update(ctx, node); err != nil {
		t.Fatal(err)
	}
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeClusterPool, "bench"); err != nil {
		t.Fatal(err)
	}
	startPodIPAM(t, e, clusterPoolConfig())
	if err := c.Create(ctx, &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "all"}}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	manyLBServices(t, e, nsvc)
	t.Logf("%d LoadBalancer Services (create + status) in %s", nsvc, time.Since(start).Round(time.Second))
	for i := range pods {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: fmt.Sprintf("pod-%03d", i)},
			Spec: corev1.PodSpec{NodeName: h.Name, Containers: []corev1.Container{{Name: "c", Image: "echo"}}}}
		if err := c.Create(ctx, p); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	kc, err := e.KubeconfigFile(dir, "agent")
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "ipamd.sock")
	run := func(podIPAM bool) {
		args := []string{"agent", "--kubeconfig", kc, "--node-name", h.Name,
			"--gossip-bind-address", h.Addr4.String(), "--metrics-addr", net.JoinHostPort(h.Addr4.String(), "9464"),
			"--pod-ipam-namespace", ns, "--pod-ipam-state-dir", filepath.Join(dir, "state"), "--pod-ipam-socket", ""}
		if podIPAM {
			args[len(args)-1] = sock
		}
		logf, err := os.Create(filepath.Join(dir, fmt.Sprintf("agent-%v.log", podIPAM)))
		if err != nil {
			t.Fatal(err)
		}
		defer logf.Close()
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "GOMEMLIMIT=48MiB")
		cmd.Stdout, cmd.Stderr = logf, logf
		p, err := h.Start(cmd)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = p.Kill(); _ = p.Wait() }()
		started := time.Now()
		if podIPAM {
			cl := ipamd.NewClient(sock)
			eventually(t, 2*time.Minute, "the agent's ipamd has a block", func() error { return cl.Status(ctx) })
			for i := range pods {
				if _, err := cl.Add(ctx, ipamd.AddRequest{Key: ipamd.Key{ContainerID: fmt.Sprintf("ctr-%03d", i), IfName: "eth0"},
					Namespace: "default", Pod: fmt.Sprintf("pod-%03d", i)}); err != nil {
					t.Fatalf("ADD %d: %v", i, err)
				}
			}
		}
		metrics := net.JoinHostPort(h.Addr4.String(), "9464")
		eventually(t, 5*time.Minute, "the agent announces every Service's address", func() error {
			v, err := scrapeIn(h, metrics, "mooring_agent_addresses_announced")
			if err == nil && int(v) < nsvc {
				err = fmt.Errorf("%v of %d announced", v, nsvc)
			}
			return err
		})
		time.Sleep(max(0, 30*time.Second-time.Since(started))) // settled
		var rss []int
		for range 30 {
			select {
			case <-p.Done():
				b, _ := os.ReadFile(logf.Name())
				t.Fatalf("agent exited: %s", tail(string(b), 2000))
			default:
			}
			rss = append(rss, procStatusKiB(t, p.PID, "VmRSS"))
			time.Sleep(time.Second)
		}
		hwm := procStatusKiB(t, p.PID, "VmHWM")
		heap, err := scrapeIn(h, metrics, "go_memstats_heap_inuse_bytes")
		if err != nil {
			t.Fatal(err)
		}
		slices.Sort(rss)
		t.Logf("BENCH agent, pod IPAM %s, %d Services, %d pods on the node: VmRSS median %.1f MiB, max %.1f MiB over 30 s (after 30 s of start-up); VmHWM %.1f MiB; Go heap in use at the end %.1f MiB",
			map[bool]string{true: fmt.Sprintf("on (%d allocations)", pods), false: "off"}[podIPAM], nsvc, pods,
			float64(rss[len(rss)/2])/1024, float64(rss[len(rss)-1])/1024, float64(hwm)/1024, heap/(1<<20))
	}
	t.Logf("load average before the runs: %s", loadavg())
	run(true)
	run(false)
	t.Logf("load average after the runs: %s", loadavg())
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// procStatusKiB reads one "kB" field of /proc/<pid>/status.
func procStatusKiB(t *testing.T, pid int, field string) int {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// buildMooring builds cmd/mooring into the test's temporary folder.
func buildMooring(t *testing.T) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "mooring")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/mooring")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/mooring: %v\n%s", err, out)
	}
	return bin
}

// relayAPI makes the apiserver (listening on the host's loopback) reachable
// at the same address inside the node's namespace: a listener opened in
// the namespace, relayed to the apiserver from the test's namespace.
func relayAPI(t *testing.T, h *netlab.Host, host string) {
	t.Helper()
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	var l net.Listener
	if err := h.Do(func() (err error) { l, err = net.Listen("tcp", u.Host); return err }); err != nil {
		t.Fatalf("listen in %s: %v", h.Name, err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { l.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			in, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer in.Close()
				out, err := net.Dial("tcp", u.Host)
				if err != nil {
					return
				}
				defer out.Close()
				go func() { _, _ = io.Copy(out, in); _ = out.(*net.TCPConn).CloseWrite() }()
				_, _ = io.Copy(in, out)
			}()
		}
	}()
}

// manyLBServices creates n LoadBalancer Services, each with its address in
// status as the controller would write it, from 32 parallel clients.
func manyLBServices(t *testing.T, e *testenv.Env, n int) {
	t.Helper()
	ctx := context.Background()
	api := e.Clientset.CoreV1().Services("default")
	work := make(chan int)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				a := netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)})
				svc, err := api.Create(ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("svc-%05d", i)},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
						Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
				if err == nil {
					svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: a.String()}}
					_, err = api.UpdateStatus(ctx, svc, metav1.UpdateOptions{})
				}
				if err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for i := range n {
		work <- i
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// scrapeIn reads one unlabelled metric from a /metrics endpoint inside
// the node's namespace: a plain HTTP/1.0 request on a socket made on the
// namespace's thread (net/http would dial from another thread).
func scrapeIn(h *netlab.Host, addr, metric string) (float64, error) {
	var body []byte
	err := h.Do(func() error {
		conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
		if err != nil {
			return err
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := fmt.Fprintf(conn, "GET /metrics HTTP/1.0\r\nHost: %s\r\n\r\n", addr); err != nil {
			return err
		}
		body, err = io.ReadAll(conn)
		return err
	})
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, metric+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no %s in the agent's metrics", metric)
}
