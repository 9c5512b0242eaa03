//go:build linux

package agent_test

import (
	"flag"
	"fmt"
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
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/testenv"
)

// The benchmarks are slow (minutes) and measure rather than assert much:
// go test ./internal/agent -run Bench -agent.bench -v -timeout 30m
var (
	benchOn   = flag.Bool("agent.bench", false, "run the failover and API-write benchmarks")
	benchRuns = flag.Int("agent.bench.runs", 10, "failover runs for TestBenchFailover")
	benchSvcs = flag.Int("agent.bench.services", 1000, "Services for TestBenchAPIWrites")
	benchMem  = flag.String("agent.bench.memlimit", "48MiB", "GOMEMLIMIT for the agents in TestBenchAPIWrites (the DaemonSet's); empty for none")
)

func requireBench(t *testing.T) {
	if !*benchOn {
		t.Skip("benchmark: run with -agent.bench")
	}
}

// Hard node loss, n times: the owner's agent SIGKILLed and its cable
// pulled; a client connects every 20 ms. After each run the node comes back
// (link up, agent restarted) and takes its addresses back.
func TestBenchFailover(t *testing.T) {
	requireBench(t)
	f := newFailoverCluster(t, 10*time.Millisecond)
	c, rank, clients := f.cluster, f.rank, f.clients
	outages := [2][]time.Duration{}
	for run := range *benchRuns {
		for _, tl := range clients {
			tl.waitServedBy(t, rank[0], 20*time.Second)
		}
		victim := c.lab.Host(rank[0])
		paths := c.detectPaths(t, rank[1:])
		kill := c.killNode(victim)
		for i, tl := range clients {
			out, node, ok := tl.outageAfter(kill, 15*time.Second)
			if !ok || node != rank[1] {
				t.Fatalf("run %d: family %d: takeover by %q ok=%v", run, i, node, ok)
			}
			outages[i] = append(outages[i], out)
		}
		t.Logf("run %d (kill at %s): IPv4 %v, IPv6 %v; %v", run+1, kill.UTC().Format("15:04:05.000"), outages[0][run].Round(time.Millisecond), outages[1][run].Round(time.Millisecond), c.detectPaths(t, rank[1:]).minus(paths))
		_ = c.agents[victim.Name].Wait()
		if err := victim.SetLinkUp("eth0"); err != nil {
			t.Fatal(err)
		}
		c.startAgent(victim)
	}
	for i, fam := range []string{"IPv4", "IPv6"} {
		med, worst := stats(outages[i])
		t.Logf("BENCH failover %s: n=%d median=%v worst=%v all=%v", fam, len(outages[i]), med, worst, roundAll(outages[i]))
	}
}

// detectPaths reads, from the surviving agents, how a node loss was found:
// confirmed early (a failed probe and no ARP/NDP answer), an early drop
// refused because the agent itself ran late (distrusted: gossip's
// suspicion decided), or gossip's verdict alone.
type detectPaths struct{ early, distrusted, failures float64 }

func (c *cluster) detectPaths(t *testing.T, nodes []string) detectPaths {
	t.Helper()
	var p detectPaths
	for _, n := range nodes {
		h := c.lab.Host(n)
		for _, m := range []struct {
			name string
			into *float64
		}{
			{"mooring_members_failures_confirmed_early_total", &p.early},
			{"mooring_members_early_failures_distrusted_total", &p.distrusted},
			{"mooring_members_failures_total", &p.failures},
		} {
			v, err := c.scrape(h, m.name)
			if err != nil {
				t.Logf("scraping %s on %s: %v", m.name, n, err)
				continue
			}
			*m.into += v
		}
	}
	return p
}

func (p detectPaths) minus(o detectPaths) detectPaths {
	return detectPaths{early: p.early - o.early, distrusted: p.distrusted - o.distrusted, failures: p.failures - o.failures}
}

func (p detectPaths) String() string {
	return fmt.Sprintf("survivors' early confirmations %.0f, distrusted %.0f, gossip verdicts %.0f", p.early, p.distrusted, p.failures-p.early)
}

func stats(ds []time.Duration) (median, worst time.Duration) {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0, 0
	}
	median = s[len(s)/2]
	if len(s)%2 == 0 {
		median = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return median.Round(time.Millisecond), s[len(s)-1].Round(time.Millisecond)
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}

// The agents' cost in API writes, with many Services on 5 nodes: creating
// the Services costs the agents no write at all (who announces follows
// from the API objects and each node's L2Announcer), a steady window sees
// no writes, and a node loss costs each survivor one L2Announcer update
// plus one Event per moved address.
func TestBenchAPIWrites(t *testing.T) {
	requireBench(t)
	names := []string{"node-1", "node-2", "node-3", "node-4", "node-5"}
	c := newCluster(t, len(names), nil)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	t.Setenv("GOMEMLIMIT", *benchMem) // read by the agents at start, not by this process
	c.startAgents()
	c.waitAnnouncers(len(names), 30*time.Second)

	before := c.apiWrites()
	start := time.Now()
	addrs := c.manyServices(*benchSvcs)
	created := time.Since(start)
	c.waitSample(addrs, names, 5*time.Minute)
	time.Sleep(2 * time.Second) // let stragglers land
	w := agentOnly(diffWrites(before, c.apiWrites()))
	// The test's own writes: one create and one status update (the
	// controller's) per Service.
	w["POST services"] -= float64(*benchSvcs)
	w["PUT services/status"] -= float64(*benchSvcs)
	for k, v := range w {
		if v == 0 {
			delete(w, k)
		}
	}
	t.Logf("BENCH %d Services created in %v on %d nodes, 20 sampled addresses answered (probed one after another) %v after the first create; agent writes %v = %.3f per Service",
		*benchSvcs, created.Round(time.Millisecond), len(names), time.Since(start).Round(time.Millisecond), w, total(w)/float64(*benchSvcs))
	// Writes here can only come from membership changes (false suspicions
	// on a loaded machine move addresses): every Event must be a move.
	c.logEventReasons()
	c.logAgentCost(names)

	const window = 30 * time.Second
	before = c.apiWrites()
	time.Sleep(window)
	steady := agentOnly(diffWrites(before, c.apiWrites()))
	t.Logf("BENCH steady window %v: agent writes %v", window, steady)
	if total(steady) != 0 {
		t.Errorf("agent writes during a steady window: %v (want none: nothing periodic)", steady)
	}

	// One node lost: only its addresses move.
	victim := announce.Rank(names, addrs[0])[0]
	var survivors []string
	for _, n := range names {
		if n != victim {
			survivors = append(survivors, n)
		}
	}
	moved := 0
	for _, a := range addrs {
		if announce.Rank(names, a)[0] == victim {
			moved++
		}
	}
	before = c.apiWrites()
	kill := c.killNode(c.lab.Host(victim))
	c.waitSample(addrs, survivors, 2*time.Minute)
	time.Sleep(5 * time.Second) // let stragglers land
	t.Logf("BENCH node loss: %s owned %d of %d addresses; 20 sampled addresses answered from their new owners (probed one after another) by %v; agent writes %v",
		victim, moved, len(addrs), time.Since(kill).Round(time.Millisecond), agentOnly(diffWrites(before, c.apiWrites())))
}

// logEventReasons logs the Events by reason, and whether any L2Announced
// was a first announcement (it must not be).
func (c *cluster) logEventReasons() {
	evs, err := c.env.Clientset.CoreV1().Events("default").List(c.ctx, metav1.ListOptions{})
	if err != nil {
		c.t.Fatal(err)
	}
	reasons, first := map[string]int{}, 0
	for _, e := range evs.Items {
		reasons[e.Reason]++
		if e.Reason == mooringv1.EventReasonAnnounced && !strings.Contains(e.Message, "(was ") {
			first++
		}
	}
	c.t.Logf("BENCH events by reason %v", reasons)
	if first > 0 {
		c.t.Errorf("%d Events for first announcements", first)
	}
}

// logAgentCost logs each agent's memory, CPU time and decisions.
func (c *cluster) logAgentCost(names []string) {
	for _, n := range names {
		var vals []string
		for _, m := range []string{"process_resident_memory_bytes", "go_memstats_heap_inuse_bytes", "process_cpu_seconds_total",
			"mooring_agent_decision_seconds_count", "mooring_agent_decision_seconds_sum"} {
			v, err := c.scrape(c.lab.Host(n), m)
			if err != nil {
				vals = append(vals, m+"=?")
				continue
			}
			if strings.HasSuffix(m, "_bytes") {
				vals = append(vals, fmt.Sprintf("%s=%.1fMiB", m, v/(1<<20)))
			} else {
				vals = append(vals, fmt.Sprintf("%s=%.3g", m, v))
			}
		}
		c.t.Logf("BENCH agent %s: %s", n, strings.Join(vals, " "))
	}
}

// waitAnnouncers waits until n agents have written their L2Announcer with
// every member.
func (c *cluster) waitAnnouncers(n int, within time.Duration) {
	c.t.Helper()
	waitFor(c.t, within, "every L2Announcer", func() (bool, string) {
		var anns mooringv1.L2AnnouncerList
		if err := c.env.Client.List(c.ctx, &anns); err != nil {
			return false, err.Error()
		}
		done := 0
		for _, a := range anns.Items {
			if len(a.Status.Members) == n {
				done++
			}
		}
		return done == n, fmt.Sprintf("%d of %d", done, n)
	})
}

// waitSample waits until 20 addresses spread over addrs answer from their
// owner among nodes.
func (c *cluster) waitSample(addrs []netip.Addr, nodes []string, within time.Duration) {
	c.t.Helper()
	step := max(1, len(addrs)/20)
	for i := 0; i < len(addrs); i += step {
		c.waitResponders(addrs[i], []string{announce.Rank(nodes, addrs[i])[0]}, within)
	}
}

// manyServices creates n LoadBalancer Services with one IPv4 address each
// (from 10.100.0.0/16: announced only inside the lab's bridge).
func (c *cluster) manyServices(n int) []netip.Addr {
	c.t.Helper()
	addrs := make([]netip.Addr, n)
	a := netip.MustParseAddr("10.100.0.0")
	for i := range addrs {
		a = a.Next()
		addrs[i] = a
	}
	work := make(chan int)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- c.createLB(fmt.Sprintf("svc-%04d", i), addrs[i])
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
		if err != nil {
			c.t.Fatal(err)
		}
	}
	return addrs
}

func (c *cluster) createLB(name string, a netip.Addr) error {
	api := c.env.Clientset.CoreV1().Services("default")
	svc, err := api.Create(c.ctx, &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeLoadBalancer, AllocateLoadBalancerNodePorts: ptr.To(false),
			Ports: []corev1.ServicePort{{Port: 80}}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	svc.Status.LoadBalancer.Ingress = []corev1.LoadBalancerIngress{{IP: a.String()}}
	_, err = api.UpdateStatus(c.ctx, svc, metav1.UpdateOptions{})
	return err
}

// apiWrites scrapes the apiserver's own request counter: mutating requests
// by verb and resource.
func (c *cluster) apiWrites() map[string]float64 {
	c.t.Helper()
	w, err := testenv.MutatingRequests(c.ctx, c.env.Clientset)
	if err != nil {
		c.t.Fatal(err)
	}
	return w
}

var diffWrites = testenv.DiffRequests

func total(m map[string]float64) float64 {
	s := 0.0
	for _, v := range m {
		s += v
	}
	return s
}

// agentOnly keeps the resources the agent writes (the apiserver's own lease
// renewals and the like are counted by the same metric).
func agentOnly(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		res := k[strings.IndexByte(k, ' ')+1:]
		switch strings.Split(res, "/")[0] {
		case "services", "events", "l2announcementpolicies", "l2announcers", "endpointslices", "nodes":
			out[k] = v
		}
	}
	return out
}

// Churn (issue 13 item 5): with -agent.bench.services Services present,
// new ones are created at -agent.bench.rate a second (a create and a status
// update each, from a pool of clients so a slow request does not slow the
// pace) while a client connects to a VIP every 10 ms; meanwhile the VIP's
// owner is killed -agent.bench.takeovers times (and brought back after each
// takeover). Logged: the creation rate reached and the requests' latency,
// each agent's and the API server's and etcd's CPU from /proc over the
// churn alone (-agent.bench.churnfor) and over the takeover series (each
// takeover moves a third of the addresses twice), and the takeovers.
func TestBenchChurn(t *testing.T) {
	requireBench(t)
	f := newFailoverCluster(t, 10*time.Millisecond)
	c, rank, clients := f.cluster, f.rank, f.clients
	addrs := c.manyServices(*benchSvcs)
	c.waitSample(addrs, three, 5*time.Minute)
	for _, tl := range clients {
		tl.waitServedBy(t, rank[0], 20*time.Second)
	}
	procs := map[string]int{"kube-apiserver": 0, "etcd": 0}
	for name := range procs {
		procs[name] = agenttest.ChildPID(t, name)
	}
	cpuOf := func(pid int) float64 {
		m, err := agenttest.ReadProc(pid)
		if err != nil {
			t.Fatal(err)
		}
		return m.CPU
	}
	// Phase 1: churn alone, every agent's and the API server's CPU.
	snap := func() map[string]float64 {
		out := map[string]float64{}
		for _, n := range rank {
			out[n] = cpuOf(c.agents[n].PID)
		}
		for name, pid := range procs {
			out[name] = cpuOf(pid)
		}
		return out
	}
	// Phase 0: the same time with no churn, for the agents' own
	// periodic work (this harness runs them with --probe-interval and
	// --safety-interval 1 s and debug logs).
	before := snap()
	idleFrom := time.Now()
	time.Sleep(*benchChurnFor)
	after := snap()
	idle := time.Since(idleFrom)
	for _, n := range append(slices.Clone(rank), "kube-apiserver", "etcd") {
		t.Logf("BENCH churn baseline (%v, no churn): %s used %.1f %% of a core", idle.Round(time.Second), n, 100*(after[n]-before[n])/idle.Seconds())
	}

	before = snap()
	start := time.Now()
	stop := make(chan struct{})
	churned := make(chan churnResult)
	go func() { churned <- c.churn(*benchRate, stop) }()
	if *benchAPIProfile != "" {
		c.apiProfile(*benchAPIProfile, *benchChurnFor-2*time.Second)
	}
	time.Sleep(*benchChurnFor - time.Since(start))
	after = snap()
	quiet := time.Since(start)
	for _, n := range append(slices.Clone(rank), "kube-apiserver", "etcd") {
		t.Logf("BENCH churn alone (%v, no takeover): %s used %.1f %% of a core", quiet.Round(time.Second), n, 100*(after[n]-before[n])/quiet.Seconds())
	}

	// Phase 2: the takeover series while the churn goes on.
	before = snap()
	phase2 := time.Now()
	outages := [2][]time.Duration{}
	for run := range *benchTakeovers {
		time.Sleep(2 * time.Second) // churn before each kill
		victim := c.lab.Host(rank[0])
		paths := c.detectPaths(t, rank[1:])
		kill := c.killNode(victim)
		for i, tl := range clients {
			out, node, ok := tl.outageAfter(kill, 15*time.Second)
			if !ok || node != rank[1] {
				close(stop)
				t.Fatalf("run %d: family %d: takeover by %q ok=%v", run, i, node, ok)
			}
			outages[i] = append(outages[i], out)
		}
		t.Logf("takeover %d during the churn (kill at %s): IPv4 %v, IPv6 %v; %v", run+1, kill.UTC().Format("15:04:05.000"), outages[0][run].Round(time.Millisecond), outages[1][run].Round(time.Millisecond), c.detectPaths(t, rank[1:]).minus(paths))
		_ = c.agents[victim.Name].Wait()
		if err := victim.SetLinkUp("eth0"); err != nil {
			t.Fatal(err)
		}
		c.startAgent(victim)
		for _, tl := range clients {
			tl.waitServedBy(t, rank[0], 60*time.Second)
		}
	}
	close(stop)
	res := <-churned
	elapsed := time.Since(start)
	t.Logf("BENCH churn (%s): %d Services present, %d changes in %v (%.1f/s, asked %d/s), %d late ticks; change p50 %v p99 %v max %v", *benchChurnKind,
		*benchSvcs, res.created, elapsed.Round(time.Millisecond), float64(res.created)/elapsed.Seconds(), *benchRate, res.late, res.p50, res.p99, res.max)
	took := time.Since(phase2)
	for _, n := range rank[1:] { // the victim restarted: its counter began anew
		t.Logf("BENCH churn with the takeovers (%v): surviving agent %s used %.1f %% of a core", took.Round(time.Second), n, 100*(cpuOf(c.agents[n].PID)-before[n])/took.Seconds())
	}
	for i, fam := range []string{"IPv4", "IPv6"} {
		med, worst := stats(outages[i])
		t.Logf("BENCH churn takeover %s: n=%d median=%v worst=%v all=%v", fam, len(outages[i]), med, worst, roundAll(outages[i]))
	}
}

var (
	benchRate       = flag.Int("agent.bench.rate", 30, "Service creations a second in TestBenchChurn")
	benchTakeovers  = flag.Int("agent.bench.takeovers", 10, "node losses during the churn in TestBenchChurn")
	benchChurnFor   = flag.Duration("agent.bench.churnfor", time.Minute, "churn alone before the takeovers in TestBenchChurn")
	benchChurnKind  = flag.String("agent.bench.churnkind", "create", "the churn's changes in TestBenchChurn: create (new Services) or readdress (a new address for a Service present)")
	benchAPIProfile = flag.String("agent.bench.apiprofile", "", "write the API server's CPU profile over the churn alone to this file (TestBenchChurn)")
)

// apiProfile writes the API server's CPU profile over d to path (its
// /debug/pprof, on by default), for finding what sets the churn's pace.
func (c *cluster) apiProfile(path string, d time.Duration) {
	c.t.Helper()
	b, err := c.env.Clientset.CoreV1().RESTClient().Get().AbsPath("/debug/pprof/profile").
		Param("seconds", strconv.Itoa(int(d.Seconds()))).Timeout(d + 30*time.Second).DoRaw(c.ctx)
	if err != nil {
		c.t.Fatalf("API server CPU profile: %v", err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("API server CPU profile over %v of churn: %s", d, path)
}

// churnOne makes the i-th change of the churn: a new Service
// (-agent.bench.churnkind=create), or a new address for one of the
// -agent.bench.services Services present (readdress: one status patch, a
// release and a take for the agents, and no ClusterIP allocation, which
// sets the pace of creations in the API server: docs/benchmarks.md).
func (c *cluster) churnOne(i int) error {
	a := netip.AddrFrom4([4]byte{10, 101 + byte(i>>16), byte(i >> 8), byte(i)})
	switch *benchChurnKind {
	case "create":
		return c.createLB(fmt.Sprintf("churn-%05d", i), a)
	case "readdress":
		patch := fmt.Sprintf(`{"status":{"loadBalancer":{"ingress":[{"ip":%q}]}}}`, a)
		_, err := c.env.Clientset.CoreV1().Services("default").Patch(c.ctx, fmt.Sprintf("svc-%04d", i%*benchSvcs),
			types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		return err
	}
	return fmt.Errorf("-agent.bench.churnkind=%q: want create or readdress", *benchChurnKind)
}

type churnResult struct {
	created, late int
	p50, p99, max time.Duration
}

// churn creates LoadBalancer Services (create + status update) at rate a
// second until stop is closed: a ticker hands out the work to 16 clients;
// a tick no client was free for counts as late.
func (c *cluster) churn(rate int, stop <-chan struct{}) churnResult {
	work := make(chan int)
	var (
		mu   sync.Mutex
		lats []time.Duration
		wg   sync.WaitGroup
	)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				t0 := time.Now()
				if err := c.churnOne(i); err != nil {
					c.t.Error(err)
					continue
				}
				mu.Lock()
				lats = append(lats, time.Since(t0))
				mu.Unlock()
			}
		}()
	}
	tick := time.NewTicker(time.Second / time.Duration(rate))
	defer tick.Stop()
	res := churnResult{}
	next := 0
loop:
	for {
		select {
		case <-stop:
			break loop
		case <-tick.C:
		}
		select {
		case work <- next:
			next++
		default:
			res.late++
		}
	}
	close(work)
	wg.Wait()
	slices.Sort(lats)
	res.created = len(lats)
	if len(lats) > 0 {
		res.p50, res.p99, res.max = lats[len(lats)/2].Round(time.Millisecond), lats[len(lats)*99/100].Round(time.Millisecond), lats[len(lats)-1].Round(time.Millisecond)
	}
	return res
}
