package agent

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
)

// An agent that did not run for longer than its peers wait for it comes
// back as a returning agent: it stops answering at once, publishes that it
// is holding down, and takes its addresses back only after --hold-down
// and the take delay. A stall shorter than the threshold changes nothing.
func TestResumeAfterLongStallHoldsDown(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	metas := map[string]membership.NodeMeta{"node-2": ready("eth0"), "node-3": ready("eth0")}
	a, _, mem, resp, vips := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, metas, agenttest.Node("node-1"), agenttest.Node("node-2"), agenttest.Node("node-3"))
	a.deps.Clock = clk
	a.cfg.TakeDelay = 500 * time.Millisecond
	reconfigured(a)
	var mono time.Duration // the process's monotonic clock
	a.stall.SetMonotonic(func() time.Duration { return mono })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	wantOwned := 0
	for _, v := range vips {
		if announce.Rank([]string{"node-1", "node-2", "node-3"}, v)[0] == "node-1" {
			wantOwned++
		}
	}
	if wantOwned == 0 {
		t.Fatal("node-1 owns nothing: no test")
	}
	answered := func() int { return len(resp.Table()[eth0.Index]) }
	published := func() membership.NodeMeta {
		mem.mu.Lock()
		defer mem.mu.Unlock()
		return mem.mine
	}
	decide := func() {
		t.Helper()
		if err := a.decide(ctx); err != nil {
			t.Fatal(err)
		}
	}
	decide()
	if answered() != wantOwned || !published().Ready {
		t.Fatalf("cold start: answers %d, want %d; published %+v", answered(), wantOwned, published())
	}

	mono += a.stall.Threshold() - 100*time.Millisecond // a short stall
	a.Trigger()
	decide()
	if answered() != wantOwned || !published().Ready || a.ready.Holding.Load() {
		t.Fatalf("after a stall shorter than the threshold: answers %d, want %d; published %+v", answered(), wantOwned, published())
	}

	mono += a.stall.Threshold() + time.Second // a long stall: no Trigger, resumed() notices
	decide()
	if got := answered(); got != 0 {
		t.Fatalf("answers %d addresses right after a long stall, want none", got)
	}
	if m := published(); m.Ready || !strings.Contains(m.Reason, "holding down") {
		t.Fatalf("published %+v after a long stall", m)
	}
	if !a.ready.Holding.Load() || gathered(a, "mooring_agent_stall_resumes_total") != 1 {
		t.Fatalf("holding %v, resumes %v", a.ready.Holding.Load(), gathered(a, "mooring_agent_stall_resumes_total"))
	}

	clk.Step(a.cfg.HoldDown)
	a.Trigger()
	decide()
	if m := published(); !m.Ready || m.Since == 0 || answered() != 0 {
		t.Fatalf("after the hold-down: published %+v, answers %d (want ready, none until the take delay)", m, answered())
	}
	clk.Step(a.cfg.TakeDelay)
	a.Trigger()
	decide()
	if answered() != wantOwned || a.ready.Holding.Load() {
		t.Fatalf("after the take delay: answers %d, want %d", answered(), wantOwned)
	}
}

func TestResumeThreshold(t *testing.T) {
	cfg := DefaultConfig()
	if got := resumeThreshold(cfg); got != cfg.AgentLossTimeout {
		t.Fatalf("kernel check on: %v, want the agent-loss timeout %v", got, cfg.AgentLossTimeout)
	}
	if cfg.AgentLossTimeout <= 2*time.Second {
		t.Fatalf("the issue's 2 s stalls must move nothing: threshold %v", cfg.AgentLossTimeout)
	}
	cfg.NodeCheckWait = 0
	if got := resumeThreshold(cfg); got != time.Second {
		t.Fatalf("kernel check off: %v, want 1s", got)
	}
}

// The split-brain probe never re-announces from a decision made before a
// stall: while a stall is pending (the decision loop has not dropped the
// decision yet) or the agent holds down, it does not probe.
func TestProbeStandsStillAfterStall(t *testing.T) {
	clk := clocktesting.NewFakeClock(time.Unix(1e9, 0))
	a, _, _, _, _ := eligibilityFixture(t, "node-1", []host.LinkInfo{eth0}, nil, agenttest.Node("node-1"))
	a.deps.Clock = clk
	a.cfg.ProbeInterval = time.Second
	pr := &countingProber{}
	a.deps.Prober = pr
	var mu sync.Mutex
	var mono time.Duration
	a.stall.SetMonotonic(func() time.Duration { mu.Lock(); defer mu.Unlock(); return mono })
	a.toProbe.Put(announce.Result{Local: []announce.Entry{{IfIndex: 2, IfName: "eth0", Addr: netip.MustParseAddr("10.213.0.100")}}})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.safetyChecks().RunProbe(ctx, a.toProbe) }()
	round := func() {
		t.Helper()
		for !clk.HasWaiters() {
			time.Sleep(time.Millisecond)
		}
		clk.Step(a.cfg.ProbeInterval)
		time.Sleep(50 * time.Millisecond)
	}
	round()
	if pr.n() != 1 {
		t.Fatalf("%d probes before the stall, want 1", pr.n())
	}
	mu.Lock()
	mono += a.stall.Threshold() + time.Second
	mu.Unlock()
	round()
	round()
	if pr.n() != 1 {
		t.Fatalf("%d probes after a stall the decision loop has not acted on, want still 1", pr.n())
	}
	cancel()
	<-done
}

type countingProber struct {
	mu    sync.Mutex
	count int
}

func (p *countingProber) Probe(context.Context, int, []netip.Addr, time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.count++
	return nil, nil
}

func (p *countingProber) n() int { p.mu.Lock(); defer p.mu.Unlock(); return p.count }

func counterValue(c interface{ Write(*dto.Metric) error }) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		return -1
	}
	return m.GetCounter().GetValue()
}
