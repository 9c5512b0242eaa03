//go:build linux

package agent_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Planned hand-offs (issue 9, item 6) under client traffic: a rolling
// restart of every agent (SIGTERM, new process, the next one once /readyz
// answers, as a DaemonSet rolling update does), then a drain of the owner
// (the exclude-from-external-load-balancers label) and its return. A client
// per family connects every 100 ms and an ARP/NDP audit samples the
// responders every 100 ms: no failed connection, never two responders in
// two samples in a row.
func TestE2EHandOffRollingRestartAndDrain(t *testing.T) {
	h := newHandOffCluster(t)
	if r := h.rollingRestart(); !r.clean() {
		t.Fatalf("rolling restart: %s; two responders in a row in %v", r, r.audit.doubleRun)
	}
	r := h.drainAndReturn()
	if !r.clean() {
		t.Fatalf("drain and return: %s; two responders in a row in %v", r, r.audit.doubleRun)
	}
	if r.back < 3*time.Second {
		t.Fatalf("the node took its addresses back %v after the label went: the 3 s hold-down was not respected", r.back)
	}
}

// The benchmark form: -agent.bench.runs rolling restarts, then as many
// drains and returns, in one cluster.
func TestBenchHandOff(t *testing.T) {
	requireBench(t)
	h := newHandOffCluster(t)
	for i := range *benchRuns {
		t.Logf("run %d: %s", i+1, h.rollingRestart())
	}
	for i := range *benchRuns {
		t.Logf("run %d: %s", i+1, h.drainAndReturn())
	}
}

type handOffCluster struct {
	failoverCluster
	t *testing.T
}

type handOffResult struct {
	what         string
	failed, sent int
	// reads: failures after the connection was made (the reply did not
	// come within 200 ms): the test process serving every node starved
	// on the loaded machine, or a connection in flight across the moment
	// the client's neighbour entry switched nodes. Every other failure
	// (no connection) would be an L2 gap.
	reads      int
	audit      auditResult
	took, back time.Duration
}

// clean: never two responders for longer than one audit interval (a
// returning node answers the moment before its peer hears it took the
// address: make before break, docs/l2.md), no connection failed, and at
// most two replies were late (see reads; the benchmark reports them all).
func (r handOffResult) clean() bool {
	return len(r.audit.doubleRun) == 0 && r.failed == r.reads && r.reads <= 2
}

func (r handOffResult) String() string {
	s := fmt.Sprintf("%s: %d of %d requests failed (%d of them late replies on a made connection) in %v; ARP/NDP audit: %s",
		r.what, r.failed, r.sent, r.reads, r.took.Round(100*time.Millisecond), r.audit)
	if r.back > 0 {
		s += fmt.Sprintf("; back home %v after the label went", r.back.Round(100*time.Millisecond))
	}
	return s
}

func newHandOffCluster(t *testing.T) handOffCluster {
	// The restarts begin 2 s after the cluster is served (a restart more
	// than 2 s after a peer became ready is one into a serving cluster,
	// handoff.ServedBefore): the survivors are seconds old, which must not
	// matter (a restart is told from a cold start alike on every node,
	// whatever their age).
	return handOffClusterOf(t, newFailoverCluster(t, 100*time.Millisecond), 2*time.Second)
}

// handOffClusterOf dumps f's logs should the test fail, waits until f's
// clients are served by the first-ranked node, then lets the cluster run
// for settle.
func handOffClusterOf(t *testing.T, f failoverCluster, settle time.Duration) handOffCluster {
	t.Cleanup(func() {
		if t.Failed() {
			f.dumpLogs()
		}
	})
	h := handOffCluster{failoverCluster: f, t: t}
	h.servedBy(f.rank[0], 10*time.Second)
	time.Sleep(settle)
	return h
}

func (h handOffCluster) servedBy(node string, within time.Duration) {
	h.t.Helper()
	for _, tl := range h.clients {
		tl.waitServedBy(h.t, node, within)
	}
}

// failures counts the client attempts started since start, the failed
// ones (each logged with its time and error) and among those the late
// replies on a made connection.
func (h handOffCluster) failures(r *handOffResult, since time.Time) {
	for i, tl := range h.clients {
		for _, a := range tl.snapshot() {
			if !a.at.After(since) {
				continue
			}
			r.sent++
			if a.ok {
				continue
			}
			r.failed++
			if strings.HasPrefix(a.node, "read_") {
				r.reads++
			}
			h.t.Logf("failed request (family %d) at +%v: %s", i, a.at.Sub(since).Round(time.Millisecond), a.node)
		}
	}
}

// owns waits until node owns both addresses (by its own metric: probing
// would add ARP requests to the audit's).
func (h handOffCluster) owns(node string, within time.Duration) {
	h.t.Helper()
	waitFor(h.t, within, node+" owns both addresses", func() (bool, string) {
		v, err := h.scrape(h.lab.Host(node), "mooring_agent_addresses_owned")
		return err == nil && v == 2, err2s(err, v)
	})
}

func (h handOffCluster) rollingRestart() handOffResult {
	h.t.Helper()
	stop := h.startAudit(h.v4, h.v6)
	start := time.Now()
	for _, n := range three {
		host := h.lab.Host(n)
		h.t.Logf("+%v terminating %s", time.Since(start).Round(time.Millisecond), n)
		h.terminate(host)
		h.startAgent(host)
		h.t.Logf("+%v started %s", time.Since(start).Round(time.Millisecond), n)
		h.waitReadyz(host, 30*time.Second)
		h.t.Logf("+%v %s ready", time.Since(start).Round(time.Millisecond), n)
	}
	// Every address back home, after the last node's hold-down.
	h.owns(h.rank[0], 20*time.Second)
	h.servedBy(h.rank[0], 10*time.Second)
	r := handOffResult{what: "rolling restart", audit: stop(), took: time.Since(start)}
	h.failures(&r, start)
	h.t.Logf("ROLLING RESTART: %s", r)
	return r
}

func (h handOffCluster) drainAndReturn() handOffResult {
	h.t.Helper()
	stop := h.startAudit(h.v4, h.v6)
	start := time.Now()
	h.excludeLabel(h.rank[0], true)
	h.owns(h.rank[1], 10*time.Second)
	h.servedBy(h.rank[1], 10*time.Second)
	back := time.Now()
	h.excludeLabel(h.rank[0], false)
	h.servedBy(h.rank[0], 20*time.Second)
	r := handOffResult{what: "drain + return", back: time.Since(back)}
	h.owns(h.rank[0], 5*time.Second)
	r.audit, r.took = stop(), time.Since(start)
	h.failures(&r, start)
	h.t.Logf("DRAIN + RETURN: %s", r)
	return r
}

// excludeLabel sets or removes node.kubernetes.io/exclude-from-external-load-balancers.
func (c *cluster) excludeLabel(node string, on bool) {
	c.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, corev1.LabelNodeExcludeBalancers)
	if !on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, corev1.LabelNodeExcludeBalancers)
	}
	if _, err := c.env.Clientset.CoreV1().Nodes().Patch(c.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}
