//go:build linux

package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A stall LONGER than the agent-loss timeout (issue 9): the owner's agent
// is stopped (SIGSTOP) until a peer has taken its addresses, then resumed
// (SIGCONT). Its old decision is stale: it must not answer, re-announce or
// pull clients back on its own, but come back as a returning agent does,
// through the hold-down. A client per family connects every 100 ms and an
// ARP/NDP audit samples the responders every 100 ms from the SIGSTOP until
// the owner serves again.
func TestE2EAgentResumeAfterLossTimeout(t *testing.T) {
	h := newHandOffCluster(t)
	r := h.stallPastLoss()
	if !r.clean() {
		t.Fatalf("%s; two responders in a row in %v", r, r.audit.doubleRun)
	}
}

// The benchmark form: -agent.bench.runs such stalls in one cluster.
func TestBenchResumeAfterLossTimeout(t *testing.T) {
	requireBench(t)
	h := newHandOffCluster(t)
	for i := range *benchRuns {
		t.Logf("run %d: %s", i+1, h.stallPastLoss())
	}
}

// holdDown is the agents' --hold-down default (agent.DefaultConfig).
const holdDown = 3 * time.Second

// stallPastLoss stops the owner's agent until the next node in the
// ranking owns both addresses (the default 4 s agent-loss timeout after
// gossip declared it failed), resumes it, and waits until it serves again.
// It fails the test when the resumed agent re-announced from its stale
// decision or clients reached it before its hold-down had passed.
func (h handOffCluster) stallPastLoss() handOffResult {
	h.t.Helper()
	owner, next := h.lab.Host(h.rank[0]), h.lab.Host(h.rank[1])
	logFile := filepath.Join(h.dir, owner.Name+".log")
	reannounced := func() int {
		b, _ := os.ReadFile(logFile)
		return strings.Count(string(b), "split brain changed: re-announcing")
	}
	before := reannounced()
	stop := h.startAudit(h.v4, h.v6)
	start := time.Now()
	pid := h.agents[owner.Name].PID
	if err := unix.Kill(-pid, unix.SIGSTOP); err != nil {
		h.t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			_ = unix.Kill(-pid, unix.SIGCONT)
		}
	}()
	h.owns(next.Name, 20*time.Second)
	// The peer's takeover (and its gratuitous series) has reached the
	// clients: the owner's decision is now stale.
	h.servedBy(next.Name, 10*time.Second)
	stall := time.Since(start)
	if err := unix.Kill(-pid, unix.SIGCONT); err != nil {
		h.t.Fatal(err)
	}
	stopped = false
	resumed := time.Now()
	h.t.Logf("+%v SIGCONT after a stall of %v", stall.Round(time.Millisecond), stall.Round(time.Millisecond))
	h.servedBy(owner.Name, 20*time.Second)
	h.owns(owner.Name, 10*time.Second)
	r := handOffResult{what: fmt.Sprintf("stall of %v", stall.Round(100*time.Millisecond))}
	r.audit, r.took = stop(), time.Since(start)
	h.failures(&r, start)
	// The first request the resumed owner served: only after its
	// hold-down, never pulled back by a stale announcement.
	first := time.Duration(-1)
	for _, tl := range h.clients {
		for _, a := range tl.snapshot() {
			if a.ok && a.node == owner.Name && a.at.After(resumed) && (first < 0 || a.at.Sub(resumed) < first) {
				first = a.at.Sub(resumed)
			}
		}
	}
	h.t.Logf("RESUME: %s; clients reached the resumed owner %v after SIGCONT", r, first.Round(time.Millisecond))
	if n := reannounced() - before; n > 0 {
		h.t.Errorf("the resumed agent re-announced %d times from its stale decision", n)
	}
	if first < holdDown {
		h.t.Errorf("clients reached the resumed owner %v after SIGCONT, before its %v hold-down", first, holdDown)
	}
	return r
}
