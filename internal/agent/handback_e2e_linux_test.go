//go:build linux

package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Hand-back after a restore (issue 22): the owner is lost hard (agent
// SIGKILLed, cable pulled), its peer takes over, then the node comes back
// (link up, agent restarted) and takes its addresses back after its
// hold-down. From the restore on, for 10 s, the ARP/NDP audit samples the
// responders every 50 ms from the spare node and a client per family that
// forgets its neighbour entry before every connection (so each one
// resolves afresh) connects every 50 ms. The peer keeps answering, with
// the returning node's MAC, until the returning node took the addresses
// (make before break): no sample without a responder,
// never two responders in two samples in a row, no failed connection.
func TestE2EHandBackAfterRestore(t *testing.T) {
	h := newHandBackCluster(t)
	for run := range 2 {
		r := h.restoreAndHandBack()
		if !r.clean() || r.audit.none > 0 {
			t.Fatalf("run %d: %s; two responders in a row in %v", run+1, r, r.audit.doubleRun)
		}
	}
}

// The benchmark form: -agent.bench.runs kills and restores in one cluster.
func TestBenchHandBack(t *testing.T) {
	requireBench(t)
	h := newHandBackCluster(t)
	var none, double, doubleRun, failed, sent int
	for i := range *benchRuns {
		r := h.restoreAndHandBack()
		t.Logf("run %d: %s", i+1, r)
		none, double, doubleRun = none+r.audit.none, double+len(r.audit.double), doubleRun+len(r.audit.doubleRun)
		failed, sent = failed+r.failed, sent+r.sent
	}
	t.Logf("BENCH hand-back: runs=%d samples-without-responder=%d samples-with-two=%d two-in-a-row=%d failed=%d of %d requests",
		*benchRuns, none, double, doubleRun, failed, sent)
}

func newHandBackCluster(t *testing.T) handOffCluster {
	f := newFailoverCluster(t, time.Second) // its own clients idle along
	f.clients = []*timeline{f.startClientFlushing(f.v4, 50*time.Millisecond, true),
		f.startClientFlushing(f.v6, 50*time.Millisecond, true)}
	// The first kill comes 2 s after the cluster is served: the survivor is
	// seconds old, and must still keep the restored node's addresses
	// until that node takes them (before handoff.StartingCandidate, an
	// agent under 10 s old let them go while the node was starting).
	return handOffClusterOf(t, f, 2*time.Second)
}

// restoreAndHandBack kills the owner, waits for the takeover, restores the
// node and audits the 10 s from the restore on.
func (h handOffCluster) restoreAndHandBack() handOffResult {
	h.t.Helper()
	victim := h.lab.Host(h.rank[0])
	h.killNode(victim)
	h.servedBy(h.rank[1], 15*time.Second)
	_ = h.agents[victim.Name].Wait()
	if err := victim.SetLinkUp("eth0"); err != nil {
		h.t.Fatal(err)
	}
	stop := h.startAuditFrom(h.lab.Host(h.rank[2]), 50*time.Millisecond, h.v4, h.v6)
	restore := time.Now()
	h.startAgent(victim)
	h.owns(victim.Name, 20*time.Second)
	back := time.Since(restore)
	if rest := 10*time.Second - back; rest > 0 {
		time.Sleep(rest)
	}
	r := handOffResult{what: fmt.Sprintf("restore + hand-back (owner again %v after the restore)", back.Round(100*time.Millisecond)), audit: stop(), took: time.Since(restore)}
	h.failures(&r, restore)
	if r.audit.none > 0 || len(r.audit.double) > 0 || r.failed > 0 {
		h.logHandOver(restore)
	}
	h.servedBy(h.rank[0], 5*time.Second)
	return r
}

// logHandOver logs each agent's lines since the restore other than
// debug ones, and those about a take and its hand-over, to place an
// audit's findings.
func (h handOffCluster) logHandOver(since time.Time) {
	for _, n := range three {
		b, _ := os.ReadFile(filepath.Join(h.dir, n+".log"))
		for _, l := range strings.Split(string(b), "\n") {
			at, _, ok := strings.Cut(strings.TrimPrefix(l, "time="), " ")
			ts, err := time.Parse(time.RFC3339Nano, at)
			if !ok || err != nil || ts.Before(since) {
				continue
			}
			if !strings.Contains(l, "level=DEBUG") || strings.Contains(l, "returning peer took") {
				h.t.Logf("%s: %s", n, l)
			}
		}
	}
}
