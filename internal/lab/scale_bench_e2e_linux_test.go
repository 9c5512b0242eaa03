package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
	"github.com/mooringlb/mooring/internal/testenv"
)

// envBenchServices turns TestBenchLabServices on: the number of Services.
const envBenchServices = "MOORING_LAB_BENCH_SERVICES"

// envBenchBGP=1 runs TestBenchLabServices in the BGP lab (the router with
// FRR, BFD 300 ms × 3, TCP-MD5, every node's agent speaking BGP): the
// bench pool is advertised by a BGPAdvertisement instead of announced by
// an L2 policy, so no ARP is probed; the router's kernel table is read
// every 2 s instead, and each Service's stage "status → route at the
// router with one next hop per node" is timed to that resolution.
const envBenchBGP = "MOORING_LAB_BENCH_BGP"

// The issue 13 figures in the lab (3 nodes, Mooring's controller and
// agents, kube-controller-manager, kube-proxy): N LoadBalancer Services
// created by 16 clients at the API server's pace, every Service asking for
// its address (mooring.dev/ips, from a /18 pool). Measured: for every
// Service, the stages of its way from creation to its address (see
// scale_trace_e2e_linux_test.go: create call, watch delivery, controller,
// agent up to the first gratuitous ARP); for 200 Services spread evenly
// over the burst, also the first answer to an ARP probe (every 20 ms from
// its create call returning); the controller's queue wait and reconcile
// time, the agents' decision time and the API server's create and status
// patch latency from their own histograms; the API
// server's mutating requests during the run by resource
// (apiserver_request_total), less the test's own creates; the agents' and
// controller's RSS and CPU from /proc; the load average and CPU pressure.
//
//	MOORING_LAB_BENCH_SERVICES=10000 go test ./internal/lab -run TestBenchLabServices -v -timeout 60m
//	MOORING_LAB_BENCH_BGP=1 MOORING_LAB_BENCH_SERVICES=10000 go test ./internal/lab -run TestBenchLabServices -v -timeout 60m
func TestBenchLabServices(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv(envBenchServices))
	if n <= 0 {
		t.Skip("benchmark: set " + envBenchServices + "=N")
	}
	bgp := os.Getenv(envBenchBGP) == "1"
	_, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, Mooring: true, BGP: lab.BGPConfig{Enabled: bgp, BFD: bgp}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	restCfg, err := kube.RESTConfig(r.Kubeconfig, 500, 1000)
	if err != nil {
		t.Fatal(err)
	}
	cs := kubernetes.NewForConfigOrDie(restCfg)
	cl, err := client.New(restCfg, client.Options{Scheme: kube.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	// A pool for the bench and a policy announcing from every node (the
	// demo one announces from two), or with BGP an advertisement of the
	// pool to the lab's peer (every node).
	var announce client.Object = &mooringv1.L2AnnouncementPolicy{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: mooringv1.L2AnnouncementPolicySpec{Interfaces: []string{"eth0"}}}
	if bgp {
		announce = &mooringv1.BGPAdvertisement{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
			Spec: mooringv1.BGPAdvertisementSpec{Pools: []string{"bench"}}}
	}
	for _, o := range []client.Object{
		&mooringv1.LoadBalancerIPPool{ObjectMeta: metav1.ObjectMeta{Name: "bench"},
			Spec: mooringv1.LoadBalancerIPPoolSpec{Blocks: []mooringv1.IPBlock{{CIDR: "10.100.0.0/18"}}}},
		announce,
	} {
		if err := cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(3 * time.Second) // the agents publish the new eligibility
	pids := labPIDs(t)
	t.Logf("BENCH lab processes: %v", pids)

	step := max(1, n/200) // ≥ 200 probed Services, evenly over the burst
	tr := newTracer(n, func(i int) string { return fmt.Sprintf("bench-%05d", i) },
		func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 100, byte((i + 1) >> 8), byte(i + 1)}) },
		func(i int) bool { return !bgp && i%step == step/2 })
	pb := rest.CopyConfig(restCfg)
	pb.ContentType = "application/vnd.kubernetes.protobuf" // the watch costs the API server less
	tr.watchServices(ctx, t, kubernetes.NewForConfigOrDie(pb), "default")
	var routes *routeTracer
	if bgp {
		routes = tr.watchRouter(ctx, t, r.Cluster.Host(lab.RouterHost), 3)
	} else {
		tr.sniff(ctx, t, r.Cluster.Host(netlab.ClientName))
	}
	hists := scrapeComponents(t, r, cs)
	before := apiWrites(ctx, t, cs)
	cost0 := costs(t, pids)
	load := startLoadSampler()

	start := time.Now()
	work := make(chan *svcTrace)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for s := range work {
				svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: s.name,
					Annotations: map[string]string{mooringv1.AnnotationPool: "bench", mooringv1.AnnotationIPs: s.addr.String()}},
					Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
						Ports: []corev1.ServicePort{{Port: 80}}}}
				sent := time.Now()
				if _, err := cs.CoreV1().Services("default").Create(ctx, svc, metav1.CreateOptions{}); err != nil {
					select {
					case errs <- err:
					default:
					}
					continue
				}
				now := time.Now()
				tr.set(s, func(s *svcTrace) *time.Time { return &s.sent }, sent)
				tr.set(s, func(s *svcTrace) *time.Time { return &s.created }, now) // the probe starts
			}
		})
	}
	for _, s := range tr.all {
		work <- s
	}
	close(work)
	wg.Wait()
	created := time.Since(start)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	lost := tr.waitAnswers(time.Minute)
	if bgp {
		lost = routes.wait(5 * time.Minute)
	}
	time.Sleep(10 * time.Second) // stragglers: status writes, Events
	loadSeen := load.finish()
	w := diffWrites(before, apiWrites(ctx, t, cs))
	w["POST services"] -= float64(n) // the test's own creates
	cost1 := costs(t, pids)
	cancel() // the watch and the sniffer
	time.Sleep(100 * time.Millisecond)

	if bgp {
		t.Logf("BENCH lab (BGP): %d Services created in %v (%.1f/s); %d without a route over 3 next hops at the router 5 min after the last create; %s",
			n, created.Round(time.Second), float64(n)/created.Seconds(), lost, routes)
	} else {
		t.Logf("BENCH lab: %d Services created in %v (%.1f/s); %d probed, %d unanswered a minute after the last create",
			n, created.Round(time.Second), float64(n)/created.Seconds(), len(tr.sampled), lost)
	}
	t.Logf("BENCH lab: %s", loadSeen)
	tr.report(t, start)
	hists.report(t, r, cs)
	var keys []string
	total, mooring := 0.0, 0.0
	for k, v := range w {
		if v != 0 {
			keys = append(keys, k)
		}
		if !strings.HasSuffix(k, " leases") {
			total += v
		}
		if mooringWrite(k) {
			mooring += v
		}
	}
	slices.Sort(keys)
	for _, k := range keys {
		t.Logf("BENCH lab writes: %-40s %8.0f  (%.3f per Service)", k, w[k], w[k]/float64(n))
	}
	t.Logf("BENCH lab writes per Service, leases aside: %.3f (the API server's own ipaddresses included); by Mooring: %.3f", total/float64(n), mooring/float64(n))
	for _, name := range slices.Sorted(maps.Keys(pids)) {
		t.Logf("BENCH lab %s: %v; %.1f CPU-s during the run (%.1f %% of a core); its threads waited %.1f s for a CPU", name, cost1[name],
			cost1[name].cpu-cost0[name].cpu, 100*(cost1[name].cpu-cost0[name].cpu)/(created.Seconds()+10), cost1[name].wait-cost0[name].wait)
	}
	if bgp { // after every figure above: the reset moves the agents' peaks
		sessionsComeUp(t, r, tr)
	}
}

// mooringWrite says whether a "VERB resource" of apiserver_request_total is
// one Mooring's controller or agents make for Services: Service status,
// Events, pool status, the agents' L2Announcers and BGPSpeakers and the BGP
// objects' conditions (leases aside: leader election renews on its own
// clock).
func mooringWrite(k string) bool {
	_, res, _ := strings.Cut(k, " ")
	switch res {
	case "services/status", "events", "loadbalancerippools/status", "l2announcers", "l2announcers/status",
		"bgpspeakers", "bgpspeakers/status", "bgppeers/status", "bgpadvertisements/status":
		return true
	}
	return false
}

// componentHistograms are the API server's, the controller's and the
// agents' own latency histograms, read before the run and compared after.
type componentHistograms map[string]histogram

// histogramsRead: where each lives (host, URL; no host: the API server's
// /metrics through the client), the metric and the series' labels.
var histogramsRead = []struct {
	what, host, url, metric string
	match                   []string
}{
	{"API server PATCH services/status (apiserver_request_duration_seconds)", "", "", "apiserver_request_duration_seconds",
		[]string{`resource="services"`, `subresource="status"`, `verb="PATCH"`}},
	{"API server POST services (apiserver_request_duration_seconds)", "", "", "apiserver_request_duration_seconds",
		[]string{`resource="services"`, `subresource=""`, `verb="POST"`}},
	{"controller queue wait (workqueue_queue_duration_seconds)", "control-plane", "http://127.0.0.1:8080/metrics", "workqueue_queue_duration_seconds", []string{`name="lbipam-services"`}},
	{"controller reconcile (workqueue_work_duration_seconds)", "control-plane", "http://127.0.0.1:8080/metrics", "workqueue_work_duration_seconds", []string{`name="lbipam-services"`}},
	{"agent node-1 decision (mooring_agent_decision_seconds)", "node-1", "http://127.0.0.1:9473/metrics", "mooring_agent_decision_seconds", nil},
	{"agent node-2 decision (mooring_agent_decision_seconds)", "node-2", "http://127.0.0.1:9473/metrics", "mooring_agent_decision_seconds", nil},
	{"agent node-3 decision (mooring_agent_decision_seconds)", "node-3", "http://127.0.0.1:9473/metrics", "mooring_agent_decision_seconds", nil},
}

func scrapeComponents(t *testing.T, r *lab.Ready, cs kubernetes.Interface) componentHistograms {
	out := componentHistograms{}
	pages := map[string][]byte{}
	for _, h := range histogramsRead {
		key := h.host + h.url
		page, ok := pages[key]
		if !ok {
			var err error
			if h.host == "" {
				page, err = cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
			} else {
				page, err = fetchFrom(r.Cluster.Host(h.host), h.url)
			}
			if err != nil {
				t.Logf("BENCH %s: not read: %v", h.what, err)
				continue
			}
			pages[key] = page
		}
		out[h.what] = parseHistogram(page, h.metric, h.match)
	}
	return out
}

func (before componentHistograms) report(t *testing.T, r *lab.Ready, cs kubernetes.Interface) {
	after := scrapeComponents(t, r, cs)
	for _, h := range histogramsRead {
		if a, ok := after[h.what]; ok {
			t.Logf("BENCH lab %s: %s", h.what, a.since(before[h.what]))
		}
	}
}

// procStat is one process's memory and CPU from /proc; wait is the time
// its threads spent runnable but waiting for a CPU (schedstat).
type procStat struct {
	rss, hwm  uint64
	cpu, wait float64
}

func (p procStat) String() string {
	return fmt.Sprintf("VmRSS %.1f MiB (VmHWM %.1f MiB)", float64(p.rss)/(1<<20), float64(p.hwm)/(1<<20))
}

func costs(t *testing.T, pids map[string]int) map[string]procStat {
	out := map[string]procStat{}
	for name, pid := range pids {
		var p procStat
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			switch f[0] {
			case "VmRSS:":
				p.rss = kb << 10
			case "VmHWM:":
				p.hwm = kb << 10
			}
		}
		b, err = os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+2:]))
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		p.cpu = (ut + st) / 100
		p.wait = runQueueWait(pid)
		out[name] = p
	}
	return out
}

// runQueueWait sums, over pid's threads, the seconds they waited on a run
// queue (/proc/PID/task/TID/schedstat, second field; threads that exited
// in between are not counted).
func runQueueWait(pid int) float64 {
	tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	total := 0.0
	for _, e := range tasks {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, e.Name()))
		if err != nil {
			continue
		}
		if f := strings.Fields(string(b)); len(f) >= 2 {
			ns, _ := strconv.ParseFloat(f[1], 64)
			total += ns / 1e9
		}
	}
	return total
}

// labPIDs finds this test's lab processes: the Mooring agents and
// controller (this binary, run as mooring) and the API server.
func labPIDs(t *testing.T) map[string]int {
	t.Helper()
	self := strconv.Itoa(os.Getpid())
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if f := strings.Fields(string(b[i+2:])); len(f) < 2 || f[1] != self {
			continue
		}
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		args := strings.Split(strings.TrimRight(string(cmd), "\x00"), "\x00")
		switch {
		case len(args) > 1 && args[1] == "controller":
			out["controller"] = pid
		case len(args) > 1 && args[1] == "agent":
			out["agent "+flagValue(args, "--node-name")] = pid
		case strings.HasSuffix(args[0], "kube-apiserver"):
			out["kube-apiserver"] = pid
		}
	}
	if len(out) < 5 {
		t.Fatalf("lab processes found: %v (want 3 agents, the controller and the API server)", out)
	}
	return out
}

func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return "?"
}

// apiWrites reads the API server's mutating requests by verb and resource.
func apiWrites(ctx context.Context, t *testing.T, cs kubernetes.Interface) map[string]float64 {
	t.Helper()
	w, err := testenv.MutatingRequests(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

var diffWrites = testenv.DiffRequests

// percentiles summarises ds: p50, p90, p99, max and how many exceed 1 s.
func percentiles(ds []time.Duration) string {
	if len(ds) == 0 {
		return "no samples"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	at := func(p int) time.Duration { return s[min(len(s)-1, len(s)*p/100)].Round(time.Millisecond) }
	over := 0
	for _, d := range s {
		if d > time.Second {
			over++
		}
	}
	return fmt.Sprintf("p50 %v p90 %v p99 %v max %v; %d of %d over 1 s", at(50), at(90), at(99), s[len(s)-1].Round(time.Millisecond), over, len(s))
}
