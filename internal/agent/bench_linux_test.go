//go:build linux

package agent_test

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/announce"
)

// The benchmarks are slow (minutes) and measure rather than assert much:
// go test ./internal/agent -run Bench -agent.bench -v -timeout 30m
var (
	benchOn   = flag.Bool("agent.bench", false, "run the failover and API-write benchmarks")
	benchRuns = flag.Int("agent.bench.runs", 10, "failover runs for TestBenchFailover")
	benchSvcs = flag.Int("agent.bench.services", 1000, "Services for TestBenchAPIWrites")
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
		kill := c.killNode(victim)
		for i, tl := range clients {
			out, node, ok := tl.outageAfter(kill, 15*time.Second)
			if !ok || node != rank[1] {
				t.Fatalf("run %d: family %d: takeover by %q ok=%v", run, i, node, ok)
			}
			outages[i] = append(outages[i], out)
		}
		t.Logf("run %d: IPv4 %v, IPv6 %v", run+1, outages[0][run].Round(time.Millisecond), outages[1][run].Round(time.Millisecond))
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

// The election's cost in API writes, with many Services on 5 nodes: after
// the initial annotations, a steady window must see no writes at all; a
// node loss costs one patch and one Event per moved address.
func TestBenchAPIWrites(t *testing.T) {
	requireBench(t)
	names := []string{"node-1", "node-2", "node-3", "node-4", "node-5"}
	c := newCluster(t, len(names), nil)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	addrs := c.manyServices(*benchSvcs)
	start := time.Now()
	// A higher client rate limit only speeds up the initial annotations;
	// the election itself never waits for the API.
	c.startAgents("--kube-api-qps=100", "--kube-api-burst=200")
	c.waitAnnotated(*benchSvcs, 5*time.Minute)
	t.Logf("BENCH %d Services on %d nodes: all annotated %v after the agents started", *benchSvcs, len(names), time.Since(start).Round(time.Millisecond))

	const window = 30 * time.Second
	before := c.apiWrites()
	time.Sleep(window)
	after := c.apiWrites()
	steady := diffWrites(before, after)
	agentWrites := agentOnly(steady)
	t.Logf("BENCH steady window %v: agent writes %v = %.2f/s; all writes (the apiserver's own leases included) %v",
		window, agentWrites, total(agentWrites)/window.Seconds(), steady)
	if total(agentWrites) != 0 {
		t.Errorf("agent writes during a steady window: %v (want none: nothing periodic)", agentWrites)
	}

	// One node lost: only its addresses move, one patch + one Event each.
	victim := announce.Rank(names, addrs[0])[0]
	moved := 0
	for _, a := range addrs {
		if announce.Rank(names, a)[0] == victim {
			moved++
		}
	}
	before = c.apiWrites()
	kill := c.killNode(c.lab.Host(victim))
	c.waitAnnouncedByNot(victim, 2*time.Minute)
	time.Sleep(5 * time.Second) // let stragglers land
	after = c.apiWrites()
	failover := diffWrites(before, after)
	t.Logf("BENCH node loss: %s owned %d of %d addresses; agent writes until all re-annotated (%v): %v",
		victim, moved, len(addrs), time.Since(kill).Round(time.Millisecond), agentOnly(failover))
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

func (c *cluster) waitAnnotated(n int, within time.Duration) {
	c.t.Helper()
	waitFor(c.t, within, "every Service annotated", func() (bool, string) {
		list, err := c.env.Clientset.CoreV1().Services("default").List(c.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		done := 0
		for _, s := range list.Items {
			if s.Annotations[mooringv1.AnnotationAnnouncedBy] != "" {
				done++
			}
		}
		return done >= n, fmt.Sprintf("%d of %d", done, n)
	})
}

func (c *cluster) waitAnnouncedByNot(node string, within time.Duration) {
	c.t.Helper()
	waitFor(c.t, within, "no Service annotated with "+node, func() (bool, string) {
		list, err := c.env.Clientset.CoreV1().Services("default").List(c.ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		left := 0
		for _, s := range list.Items {
			if strings.Contains(s.Annotations[mooringv1.AnnotationAnnouncedBy], "="+node+"/") {
				left++
			}
		}
		return left == 0, fmt.Sprintf("%d left", left)
	})
}

// apiWrites scrapes the apiserver's own request counter: mutating requests
// by verb and resource.
func (c *cluster) apiWrites() map[string]float64 {
	c.t.Helper()
	raw, err := c.env.Clientset.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(c.ctx)
	if err != nil {
		c.t.Fatal(err)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		verb, res := label(line, "verb"), label(line, "resource")
		if sub := label(line, "subresource"); sub != "" {
			res += "/" + sub
		}
		switch verb {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		default:
			continue
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		out[verb+" "+res] += v
	}
	return out
}

func label(line, name string) string {
	i := strings.Index(line, name+`="`)
	if i < 0 {
		return ""
	}
	rest := line[i+len(name)+2:]
	return rest[:strings.IndexByte(rest, '"')]
}

func diffWrites(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	return out
}

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
		case "services", "events", "l2announcementpolicies", "endpointslices", "nodes":
			out[k] = v
		}
	}
	return out
}
