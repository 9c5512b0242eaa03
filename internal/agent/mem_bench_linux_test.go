//go:build linux

package agent_test

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/netlab"
)

var (
	memBins = flag.String("agent.bench.bins", "", "comma-separated mooring binaries TestBenchMemory compares (default: this tree's)")
)

// The agent's memory at -agent.bench.services Services on 3 nodes, each
// Service with an EndpointSlice of two endpoints (as the endpointslice
// controller writes for a Service with a selector): the agents' RSS from
// /proc, idle and after every Service answers, for each binary in
// -agent.bench.bins (all run against the same Services, one after
// another). The goal (issue 13) is an RSS under 64 MiB at 10,000.
//
//	go test ./internal/agent -run TestBenchMemory -agent.bench -agent.bench.services=10000 -v -timeout 40m
func TestBenchMemory(t *testing.T) {
	requireBench(t)
	c := newCluster(t, 3, nil)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	t.Setenv("GOMEMLIMIT", *benchMem) // read by the agents at start
	bins := []string{agentBinary(t)}
	if *memBins != "" {
		bins = strings.Split(*memBins, ",")
	}
	for _, bin := range bins {
		c.memRound(bin, "idle", nil)
	}
	start := time.Now()
	addrs := c.manyServices(*benchSvcs)
	c.manySlices(*benchSvcs)
	t.Logf("BENCH memory: %d Services and EndpointSlices created in %v", *benchSvcs, time.Since(start).Round(time.Second))
	for _, bin := range bins {
		c.memRound(bin, fmt.Sprint(*benchSvcs), func() { c.waitSample(addrs, three, 5*time.Minute) })
	}
}

// memRound starts the three agents from bin, waits for them (and for
// ready, if given), lets them settle and logs each one's memory; then
// stops them.
func (c *cluster) memRound(bin, label string, ready func()) {
	c.t.Helper()
	procs := map[string]*netlab.Process{}
	start := time.Now()
	for _, h := range c.lab.Nodes() {
		procs[h.Name] = c.startAgentBin(h, bin)
	}
	c.waitAnnouncers(len(procs), 2*time.Minute)
	if ready != nil {
		ready()
	}
	synced := time.Since(start)
	for _, settle := range []time.Duration{20 * time.Second, 60 * time.Second} {
		time.Sleep(settle - time.Since(start) + synced) // GC cycles, the scavenger, the periodic loops
		for _, h := range c.lab.Nodes() {
			m, err := agenttest.ReadProc(procs[h.Name].PID)
			if err != nil {
				c.t.Fatal(err)
			}
			c.t.Logf("BENCH memory %s smaps: %s", h.Name, smapsSummary(procs[h.Name].PID))
			heap, _ := c.scrape(h, "go_memstats_heap_inuse_bytes")
			c.t.Logf("BENCH memory %s %s Services, %s, %v after ready: %v heap-inuse=%.1fMiB (ready after %v)", filepath.Base(bin), label, h.Name,
				settle, m, heap/(1<<20), synced.Round(time.Millisecond))
		}
	}
	for _, p := range procs {
		_ = p.Kill()
		_ = p.Wait()
	}
}

// startAgentBin is startAgent with another binary.
func (c *cluster) startAgentBin(h *netlab.Host, bin string) *netlab.Process {
	c.t.Helper()
	logf, err := os.OpenFile(filepath.Join(c.dir, h.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() { logf.Close() })
	cmd := exec.Command(bin, "agent", "--kubeconfig", c.kcs[h.Name], "--node-name", h.Name,
		"--gossip-bind-address", h.Addr4.String(), "--gossip-port", fmt.Sprint(gossipPort),
		"--metrics-addr", net.JoinHostPort(h.Addr4.String(), fmt.Sprint(metricsPort)),
		"--probe-interval", "1s", "--safety-interval", "1s", "--insecure-gossip")
	cmd.Stdout, cmd.Stderr = logf, logf
	p, err := h.Start(cmd)
	if err != nil {
		c.t.Fatal(err)
	}
	c.agents[h.Name] = p
	return p
}

// manySlices writes one EndpointSlice with two endpoints (on two of the
// nodes) for each Service manyServices created.
func (c *cluster) manySlices(n int) {
	c.t.Helper()
	nodes := c.lab.Nodes()
	api := c.env.Clientset.DiscoveryV1().EndpointSlices("default")
	parallel(c.t, n, func(i int) error {
		name := fmt.Sprintf("svc-%04d", i)
		es := &discoveryv1.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Namespace: "default", Name: name + "-x7k2p", Labels: map[string]string{discoveryv1.LabelServiceName: name}},
			AddressType: discoveryv1.AddressTypeIPv4,
			Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("http"), Port: ptr.To(int32(8080))}},
		}
		for j := range 2 {
			es.Endpoints = append(es.Endpoints, discoveryv1.Endpoint{Addresses: []string{fmt.Sprintf("10.244.%d.%d", j, i%250)},
				NodeName: ptr.To(nodes[(i+j)%len(nodes)].Name), Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}})
		}
		_, err := api.Create(c.ctx, es, metav1.CreateOptions{})
		return err
	})
}

// parallel runs fn(0..n-1) on 16 workers and fails t on the first error.
func parallel(t *testing.T, n int, fn func(i int) error) {
	t.Helper()
	work := make(chan int)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				errs <- fn(i)
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
			t.Fatal(err)
		}
	}
}

// smapsSummary sums Rss per kind of mapping in /proc/<pid>/smaps: the
// binary's code (r-x), read-only data (r--: rodata, pclntab), writable
// data, and anonymous memory (Go heap arenas, stacks, runtime metadata).
func smapsSummary(pid int) string {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		return err.Error()
	}
	sums := map[string]uint64{}
	var order []string
	kind := ""
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: range perms offset dev inode [path]
			path := "anon"
			if len(f) > 5 {
				path = filepath.Base(f[5])
			}
			kind = path + " " + f[1]
			if _, ok := sums[kind]; !ok {
				order = append(order, kind)
				sums[kind] = 0
			}
			continue
		}
		if f[0] == "Rss:" && len(f) > 1 {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			sums[kind] += kb << 10
		}
	}
	var out []string
	for _, k := range order {
		if sums[k] >= 512<<10 {
			out = append(out, fmt.Sprintf("%s=%.1fMiB", k, agenttest.MiB(sums[k])))
		}
	}
	return strings.Join(out, " ")
}
