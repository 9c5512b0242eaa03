//go:build linux

package agent_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/agent/evict"
	"github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// A false eviction costs no request (issue 9 item 8), in the whole lab:
// real kube-apiserver, kube-controller-manager (EndpointSlices), kube-proxy
// in nftables mode on every node, the kubelet stand-in with the echo pods,
// Mooring's agents with --fast-endpoint-eviction, all in namespaces.
//
// The fault makes node-2 look dead to the agents while it is alive: its
// agent is SIGSTOPped and its kernel's ARP replies and neighbour
// advertisements are dropped, so the agents' own packet-socket check gets
// no answer. Dropping them would also cut the data path (the other nodes
// re-resolve node-2 to forward to echo-2, the control plane to answer its
// kubelet), which is not the eviction's doing: during the fault every other
// namespace holds a permanent neighbour entry for node-2, which the
// agents' check never reads. Node-2's kubelet stand-in is stopped too (its
// pods keep running): it takes a foreign Ready=False back on the pod's
// update event, before the EndpointSlice controller publishes it, whereas
// a real kubelet does so at its status manager's next full sync (every
// 10 s); held, the eviction really reaches kube-proxy and echo-2 is out of
// the Service for seconds.
//
// The requests (a new connection every 25 ms, 3 s timeout) go to a
// Service address node-2 does not announce: a false death also moves
// node-2's own addresses away and back, which is phase 1's business
// (hack/evict/false-eviction.sh measures the whole; docs/benchmarks.md).
//
// It asserts: echo-2 marked NotReady with Mooring's reason and an Event;
// its endpoint not ready in both EndpointSlices while echo-1 keeps
// answering; after the fault the kubelet marks it Ready and echo-2 serves
// again; the load's address never moved; and not one request failed, from
// before the fault until node-2 answers for its own addresses again.
func TestE2EFalseEvictionCostsNoRequest(t *testing.T) {
	r, state := startEvictLab(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	const victim, pod = "node-2", "echo-2"
	vh := r.Cluster.Host(victim)
	if len(r.Service.Ingress) == 0 {
		t.Fatal("the demo Service has no LoadBalancer address")
	}
	// The load goes to an address that node-2 does not announce: a false
	// death also moves node-2's own addresses away and back (phase 1,
	// measured by hack/evict/false-eviction.sh); this is about the eviction.
	target := addressNotOn(ctx, t, cs, r, vh)
	url := "http://" + netip.AddrPortFrom(target, lab.DemoPort).String() + "/"
	owner := responderOf(ctx, t, r, target)
	t.Logf("load on %s, announced by %s", target, owner)
	const reqTimeout = 3 * time.Second
	load := startEchoLoad(r.Cluster.Host("client"), []string{url}, 25*time.Millisecond, reqTimeout)
	defer load.stop()
	waitFor(t, 30*time.Second, "both echo pods serving", func() (bool, string) {
		s := load.servedBy(time.Time{})
		return s["echo-1"] > 0 && s[pod] > 0, fmt.Sprint(s)
	})
	// The first connections of a load can meet node-1 before kube-proxy
	// programmed the address: their conntrack entries keep the SYN
	// retransmits on the same dead path until the client gives up (seen on
	// CI: 11 requests started 0.2-0.4 s before the cut). The fault waits
	// until every request of that warm-up has finished, and only requests
	// started after it count; a failure after warm-up still fails the test.
	warm := time.Now()
	time.Sleep(reqTimeout + 500*time.Millisecond)
	if _, f := load.totalsSince(time.Time{}, warm); len(f) > 0 {
		t.Logf("%d requests of the warm-up failed (not counted): first %v", len(f), f[0].err)
	}

	agentPID := labProcess(t, state, []string{"agent"}, victim)
	kubeletPID := labProcess(t, state, []string{"lab", "kubelet"}, victim)
	// Whatever happens, nothing stays stopped, blocked or pinned (the lab's
	// teardown SIGKILLs the processes, stopped or not).
	others := []string{"control-plane", "client"}
	for _, n := range []string{"node-1", "node-3"} {
		if r.Cluster.Host(n) != nil {
			others = append(others, n)
		}
	}
	lifted := false
	lift := func() {
		if lifted {
			return
		}
		lifted = true
		nftIn(t, vh, "delete table arp mooring_e2e_evict\ndelete table ip6 mooring_e2e_evict6")
		for _, pid := range []int{agentPID, kubeletPID} {
			if err := unix.Kill(pid, unix.SIGCONT); err != nil {
				t.Error(err)
			}
		}
		for _, h := range others {
			pinNeighbours(t, r.Cluster.Host(h), vh, false)
		}
	}
	defer lift()

	for _, h := range others {
		pinNeighbours(t, r.Cluster.Host(h), vh, true)
	}
	for _, pid := range []int{kubeletPID, agentPID} {
		if err := unix.Kill(pid, unix.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	nftIn(t, vh, `table arp mooring_e2e_evict {
  chain out { type filter hook output priority 0; arp operation reply drop; }
}
table ip6 mooring_e2e_evict6 {
  chain out { type filter hook output priority 0; icmpv6 type nd-neighbor-advert drop; }
}`)
	cut := time.Now()
	waitFor(t, 20*time.Second, pod+" marked NotReady by Mooring", func() (bool, string) {
		c := podCondition(ctx, t, cs, pod)
		return c.Status == corev1.ConditionFalse && c.Reason == evict.PodReasonNodeUnreachable, fmt.Sprintf("%s %s", c.Status, c.Reason)
	})
	marked := time.Since(cut)
	waitFor(t, 20*time.Second, pod+"'s endpoint not ready in every EndpointSlice", func() (bool, string) {
		ready, err := endpointReady(ctx, cs, pod)
		return err == nil && !slices.Contains(ready, true), fmt.Sprint(ready, err)
	})
	out := time.Now()
	t.Logf("%s marked NotReady %v after the cut, its endpoints out %v after the cut", pod, marked.Round(time.Millisecond), out.Sub(cut).Round(time.Millisecond))
	time.Sleep(3 * time.Second) // requests go to echo-1 only, through kube-proxy's new rules
	lift()
	healed := time.Now()
	waitFor(t, 30*time.Second, "the kubelet marks "+pod+" Ready and its endpoints return", func() (bool, string) {
		c := podCondition(ctx, t, cs, pod)
		ready, err := endpointReady(ctx, cs, pod)
		return c.Status == corev1.ConditionTrue && err == nil && len(ready) > 0 && !slices.Contains(ready, false),
			fmt.Sprintf("pod %s %s, endpoints %v %v", c.Status, c.Reason, ready, err)
	})
	waitFor(t, 30*time.Second, pod+" serving again", func() (bool, string) {
		s := load.servedBy(healed)
		return s[pod] > 5, fmt.Sprint(s)
	})
	// The address moved off node-2 when it looked dead; it comes back after
	// the hold-down, and that hand-back is part of the false death too.
	waitFor(t, 30*time.Second, "the addresses answered by "+victim+" alone", func() (bool, string) {
		for _, a := range r.Service.Ingress {
			macs, err := netlab.Probe(ctx, r.Cluster.Host("client"), netip.MustParseAddr(a), 300*time.Millisecond)
			if err != nil || len(macs) != 1 || macs[0].String() != vh.MAC.String() {
				return false, fmt.Sprintf("%s: %v %v", a, macs, err)
			}
		}
		return true, ""
	})
	time.Sleep(2 * time.Second)
	load.stop()
	if now := responderOf(ctx, t, r, target); now != owner {
		t.Errorf("%s moved from %s to %s: the load was not on an address the fault leaves alone", target, owner, now)
	}

	total, failed := load.totalsSince(warm, time.Now().Add(time.Hour))
	out1, back := load.servedBetween(out, healed), load.servedBetween(healed, time.Now())
	t.Logf("requests: %d, failed %d; answered by pod while echo-2's endpoints were out: %v, after the fault: %v", total, len(failed), out1, back)
	if len(failed) > 0 {
		var lines []string
		for _, f := range failed {
			lines = append(lines, fmt.Sprintf("%+.2fs %s: %s", f.at.Sub(cut).Seconds(), f.url, f.err))
		}
		t.Errorf("%d of %d requests failed across a false eviction (times from the cut; marked at %+.2fs, endpoints out at %+.2fs, fault lifted at %+.2fs):\n%s",
			len(failed), total, marked.Seconds(), out.Sub(cut).Seconds(), healed.Sub(cut).Seconds(), strings.Join(lines, "\n"))
	}
	if out1["echo-1"] < 20 || back[pod] == 0 {
		t.Errorf("the load did not run through the fault: answers while echo-2 was out %v, after %v", out1, back)
	}
	evs, err := cs.CoreV1().Events(metav1.NamespaceDefault).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + victim})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(evs.Items, func(e corev1.Event) bool { return e.Reason == "MooringPodsMarkedNotReady" }) {
		t.Errorf("no MooringPodsMarkedNotReady Event on %s", victim)
	}
	if t.Failed() {
		dumpLabLogs(t, state)
	}
}

// addressNotOn creates LoadBalancer Services in front of the echo pods
// until one gets an address that victim does not announce, and returns it.
func addressNotOn(ctx context.Context, t *testing.T, cs kubernetes.Interface, r *lab.Ready, victim *netlab.Host) netip.Addr {
	t.Helper()
	for i := range 8 {
		name := fmt.Sprintf("evict-%d", i+1)
		svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: lab.DemoNamespace},
			Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, Selector: map[string]string{"app": "echo"},
				Ports: []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: lab.DemoPort, TargetPort: intstr.FromInt32(lab.EchoPort)}}}}
		if _, err := cs.CoreV1().Services(lab.DemoNamespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var addr netip.Addr
		waitFor(t, 30*time.Second, name+" answered on its LoadBalancer address", func() (bool, string) {
			s, err := cs.CoreV1().Services(lab.DemoNamespace).Get(ctx, name, metav1.GetOptions{})
			if err != nil || len(s.Status.LoadBalancer.Ingress) == 0 {
				return false, fmt.Sprint(err)
			}
			addr = netip.MustParseAddr(s.Status.LoadBalancer.Ingress[0].IP)
			macs, err := netlab.Probe(ctx, r.Cluster.Host("client"), addr, 300*time.Millisecond)
			return err == nil && len(macs) == 1, fmt.Sprint(addr, macs, err)
		})
		if responderOf(ctx, t, r, addr) != victim.Name {
			return addr
		}
	}
	t.Fatalf("8 addresses, all announced by %s", victim.Name)
	return netip.Addr{}
}

// responderOf names the node that answers ARP for addr from the client.
func responderOf(ctx context.Context, t *testing.T, r *lab.Ready, addr netip.Addr) string {
	t.Helper()
	macs, err := netlab.Probe(ctx, r.Cluster.Host("client"), addr, 300*time.Millisecond)
	if err != nil || len(macs) != 1 {
		t.Fatalf("responders for %s: %v %v", addr, macs, err)
	}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		if h := r.Cluster.Host(n); h != nil && h.MAC.String() == macs[0].String() {
			return n
		}
	}
	return macs[0].String()
}

// startEvictLab runs the lab (3 nodes, Mooring as processes of the e2e
// binary, whose agents run --fast-endpoint-eviction) until the test ends and
// returns it with its state dir.
func startEvictLab(t *testing.T) (*lab.Ready, string) {
	t.Helper()
	netlab.RequirePrivileges(t)
	kubebin, crds := lab.FindKubeBin(), lab.FindCRDDir("")
	_, nftErr := exec.LookPath("nft")
	if kubebin == "" || crds == "" || nftErr != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("lab prerequisites missing: kubebin %q, crds %q, nft: %v", kubebin, crds, nftErr)
		}
		t.Skipf("lab prerequisites missing: kubebin %q, crds %q, nft: %v", kubebin, crds, nftErr)
	}
	state := filepath.Join(t.TempDir(), "lab")
	cfg := lab.Config{
		Nodes: 3, StateDir: state, KubeBin: kubebin, CRDDir: crds, Self: agentBinary(t), Mooring: true,
		NodeMonitorGracePeriod: lab.DefaultNodeMonitorGracePeriod, Timeout: 2 * time.Minute,
		Log: slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	ctx, cancel := context.WithCancel(context.Background())
	readyc := make(chan *lab.Ready, 1)
	errc := make(chan error, 1)
	go func() { errc <- lab.Run(ctx, cfg, func(r *lab.Ready) { readyc <- r }) }()
	t.Cleanup(func() { cancel(); <-errc })
	select {
	case r := <-readyc:
		return r, state
	case err := <-errc:
		t.Fatalf("lab.Run returned before ready: %v", err)
	case <-time.After(3 * time.Minute):
		t.Fatal("lab not ready after 3 minutes")
	}
	return nil, ""
}

// labProcess finds the pid of the lab's process of node whose arguments
// start with args, by its command line (each lab has its own state dir).
func labProcess(t *testing.T, state string, args []string, node string) int {
	t.Helper()
	want := append(slices.Clone(args), "--kubeconfig="+filepath.Join(state, "cluster.kubeconfig"), "--node-name="+node)
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(argv) > len(want) && slices.Equal(argv[1:1+len(want)], want) {
			return pid
		}
	}
	t.Fatalf("no process %q for %s", want, node)
	return 0
}

// pinNeighbours sets (pin) or removes permanent neighbour entries for
// target's addresses on h's eth0; removed, the kernel learns them again.
func pinNeighbours(t *testing.T, h, target *netlab.Host, pin bool) {
	t.Helper()
	nl, err := h.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	link, err := nl.LinkByName("eth0")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []netip.Addr{target.Addr4, target.Addr6} {
		n := &netlink.Neigh{LinkIndex: link.Attrs().Index, State: netlink.NUD_PERMANENT, IP: a.AsSlice(),
			HardwareAddr: target.MAC, Family: netlink.FAMILY_V4}
		if a.Is6() {
			n.Family = netlink.FAMILY_V6
		}
		if pin {
			err = nl.NeighSet(n)
		} else if err = nl.NeighDel(n); errors.Is(err, unix.ENOENT) {
			err = nil
		}
		if err != nil {
			t.Errorf("neighbour %s on %s (pin %v): %v", a, h.Name, pin, err)
		}
	}
}

func nftIn(t *testing.T, h *netlab.Host, script string) {
	t.Helper()
	if err := h.Nft(script); err != nil {
		t.Error(err)
	}
}

func podCondition(ctx context.Context, t *testing.T, cs kubernetes.Interface, name string) corev1.PodCondition {
	t.Helper()
	p, err := cs.CoreV1().Pods(lab.DemoNamespace).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return corev1.PodCondition{Reason: err.Error()}
	}
	return condition(p, corev1.PodReady)
}

// endpointReady lists the ready condition of pod's endpoint in each of the
// demo Service's EndpointSlices (a missing endpoint counts as not ready).
func endpointReady(ctx context.Context, cs kubernetes.Interface, pod string) ([]bool, error) {
	l, err := cs.DiscoveryV1().EndpointSlices(lab.DemoNamespace).List(ctx, metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + lab.DemoService})
	if err != nil {
		return nil, err
	}
	var out []bool
	for _, s := range l.Items {
		ready := false
		for _, e := range s.Endpoints {
			if e.TargetRef != nil && e.TargetRef.Name == pod {
				ready = e.Conditions.Ready == nil || *e.Conditions.Ready
			}
		}
		out = append(out, ready)
	}
	return out, nil
}

func dumpLabLogs(t *testing.T, state string) {
	for _, n := range []string{"mooring-agent-node-1", "mooring-agent-node-2", "mooring-agent-node-3", "kubelet-node-2", "kube-proxy-node-1", "kube-proxy-node-3"} {
		b, _ := os.ReadFile(filepath.Join(state, "logs", n+".log"))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		t.Logf("---- %s (last 30 lines) ----\n%s", n, strings.Join(lines[max(0, len(lines)-30):], "\n"))
	}
}

// echoLoad sends GETs to each URL from a host every interval, each on a new
// connection in its own goroutine (overlapping, as many clients would), and
// records which pod answered or why it failed.
type echoLoad struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	res    []echoResult
}

type echoResult struct {
	at       time.Time
	url, pod string
	err      error
}

func startEchoLoad(h *netlab.Host, urls []string, every, timeout time.Duration) *echoLoad {
	ctx, cancel := context.WithCancel(context.Background())
	l := &echoLoad{cancel: cancel}
	cl := &http.Client{Timeout: timeout, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: failover.NamespaceDialer(h.NS())}}
	for _, u := range urls {
		l.wg.Go(func() {
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				l.wg.Go(func() { l.one(ctx, cl, u) })
			}
		})
	}
	return l
}

func (l *echoLoad) one(ctx context.Context, cl *http.Client, u string) {
	r := echoResult{at: time.Now(), url: u}
	req, _ := http.NewRequestWithContext(context.WithoutCancel(ctx), http.MethodGet, u, nil)
	resp, err := cl.Do(req)
	if err == nil {
		var b []byte
		b, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("%s", resp.Status)
		}
		for _, f := range strings.Fields(string(b)) {
			if p, ok := strings.CutPrefix(f, "pod="); ok {
				r.pod = p[strings.LastIndexByte(p, '/')+1:]
			}
		}
	}
	r.err = err
	l.mu.Lock()
	l.res = append(l.res, r)
	l.mu.Unlock()
}

// stop ends the load and waits for the requests in flight.
func (l *echoLoad) stop() { l.cancel(); l.wg.Wait() }

// servedBy counts the answers per pod of requests started after since.
func (l *echoLoad) servedBy(since time.Time) map[string]int {
	return l.servedBetween(since, time.Now().Add(time.Hour))
}

// servedBetween counts the answers per pod of requests started in [from, to).
func (l *echoLoad) servedBetween(from, to time.Time) map[string]int {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := map[string]int{}
	for _, r := range l.res {
		if r.err == nil && !r.at.Before(from) && r.at.Before(to) {
			out[r.pod]++
		}
	}
	return out
}

// totalsSince counts the requests started in [from, to) and returns those
// that failed.
func (l *echoLoad) totalsSince(from, to time.Time) (int, []echoResult) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var n int
	var failed []echoResult
	for _, r := range l.res {
		if r.at.Before(from) || !r.at.Before(to) {
			continue
		}
		n++
		if r.err != nil {
			failed = append(failed, r)
		}
	}
	return n, failed
}
