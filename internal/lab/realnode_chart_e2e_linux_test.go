package lab_test

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/lab/realnode"
	"github.com/mooringlb/mooring/internal/netlab"
)

// arpAudit asks the client's segment who answers ARP/NDP for addrs, one
// round after the other (labtest.Responders: 300 ms each), until stopped,
// and keeps every round that saw two responders for one address.
type arpAudit struct {
	mu      sync.Mutex
	samples int
	double  []string
	errs    int
	silent  int                   // rounds in which an address had no responder
	last    map[netip.Addr]string // the responder of the last round with one
	moves   []string              // an address answered from another MAC than before
	stop    context.CancelFunc
	done    chan struct{}
}

func startARPAudit(ctx context.Context, host *netlab.Host, addrs []netip.Addr) *arpAudit {
	ctx, cancel := context.WithCancel(ctx)
	a := &arpAudit{last: map[netip.Addr]string{}, stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(a.done)
		for ctx.Err() == nil {
			res, err := labtest.Responders(ctx, host, addrs)
			if ctx.Err() != nil {
				return
			}
			a.mu.Lock()
			if err != nil {
				a.errs++
			} else {
				a.samples++
			}
			if err == nil {
				a.record(addrs, res)
			}
			a.mu.Unlock()
		}
	}()
	return a
}

// record notes one round's doubles, silences and moves (a.mu held).
func (a *arpAudit) record(addrs []netip.Addr, res map[netip.Addr][]net.HardwareAddr) {
	now := time.Now().Format("15:04:05.000")
	for _, ip := range addrs {
		var ms []string
		for _, m := range res[ip] {
			ms = append(ms, m.String())
		}
		switch {
		case len(ms) > 1:
			a.double = append(a.double, fmt.Sprintf("%s %s: %s", now, ip, strings.Join(ms, " ")))
		case len(ms) == 0:
			a.silent++
		default:
			if prev := a.last[ip]; prev != "" && prev != ms[0] {
				a.moves = append(a.moves, fmt.Sprintf("%s %s: %s → %s", now, ip, prev, ms[0]))
			}
			a.last[ip] = ms[0]
		}
	}
}

// end stops the audit and fails t if a round saw two responders or none
// ran.
func (a *arpAudit) end(t *testing.T) string {
	t.Helper()
	a.stop()
	<-a.done
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.double) > 0 {
		t.Errorf("two ARP/NDP responders for one address in %d of %d audit rounds: %s", len(a.double), a.samples, strings.Join(a.double, "; "))
	}
	if a.samples == 0 {
		t.Errorf("the ARP audit completed no round (%d errors)", a.errs)
	}
	return fmt.Sprintf("%d audit rounds (%d failed), %d with two responders, %d address-rounds unanswered, moves %v",
		a.samples, a.errs, len(a.double), a.silent, a.moves)
}

// serviceAddrs are the demo Service's LoadBalancer addresses.
func serviceAddrs(t *testing.T, r *lab.Ready) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, ip := range r.Service.Ingress {
		out = append(out, netip.MustParseAddr(ip))
	}
	if len(out) == 0 {
		t.Fatal("the demo Service has no LoadBalancer address")
	}
	return out
}

func mustMAC(t *testing.T, s string) net.HardwareAddr {
	t.Helper()
	m, err := net.ParseMAC(s)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// agentPod is the chart's agent pod on node.
func agentPod(t *testing.T, cs kubernetes.Interface, node string) corev1.Pod {
	t.Helper()
	pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=agent", FieldSelector: "spec.nodeName=" + node})
	if err != nil || len(pods.Items) != 1 || len(pods.Items[0].Status.ContainerStatuses) != 1 {
		t.Fatalf("the agent pod on %s: %v %s", node, err, podSummary(pods))
	}
	return pods.Items[0]
}

// agentPID is the host PID of the agent process in node's cgroup.
func agentPID(t *testing.T, node string) int {
	t.Helper()
	pids, err := realnode.CgroupPIDs(fmt.Sprintf("/mooring-lab-%d/%s", os.Getpid(), node))
	if err != nil {
		t.Fatal(err)
	}
	var agents []int
	for _, pid := range pids {
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(cmd), "\x00"); len(args) > 1 && args[0] == "/mooring" && args[1] == "agent" {
			agents = append(agents, pid)
		}
	}
	if len(agents) != 1 {
		t.Fatalf("agent processes in %s's cgroup: %v, want one", node, agents)
	}
	return agents[0]
}

// checkWedgedAgent stops (SIGSTOP) the agent of the node that answers
// for the demo Service and never resumes it: the agent's liveness probe
// (/healthz, served by the agent process) times out, the kubelet kills
// the container and starts it again. The pod's restartCount goes up, the
// agent is Ready again, the Service's addresses are answered by exactly
// one node, and the ARP audit never saw two responders meanwhile (the
// stopped agent's peers take its addresses; it must not answer again).
// The client's 20 req/s are counted and logged.
func checkWedgedAgent(t *testing.T, cs kubernetes.Interface, r *lab.Ready) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client := r.Cluster.Host(netlab.ClientName)
	addrs := serviceAddrs(t, r)
	owners, err := labtest.OneResponderEach(ctx, client, addrs)
	if err != nil {
		t.Fatalf("before the wedge: %v", err)
	}
	node := labNodeMACs(r).Node(mustMAC(t, owners[addrs[0]]))
	if node == "" {
		t.Fatalf("%s is answered by %s, which is no node", addrs[0], owners[addrs[0]])
	}
	before := agentPod(t, cs, node)
	pid := agentPID(t, node)
	arp := startARPAudit(ctx, client, addrs)
	load := &labtest.Load{Host: client, URLs: labtest.URLs(addrs[:1]), Interval: 50 * time.Millisecond, Timeout: 3 * time.Second}
	lctx, lstop := context.WithCancel(ctx)
	load.Start(lctx)
	evictions := watchNotReady(lctx, cs, node)
	time.Sleep(2 * time.Second)
	stopped := time.Now()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("SIGSTOP %d: %v", pid, err)
	}
	t.Logf("agent of %s (pod %s, PID %d, restarts %d) stopped at %s", node, before.Name, pid,
		before.Status.ContainerStatuses[0].RestartCount, stopped.Format("15:04:05.000"))
	after, ready := waitAgentRestarted(t, cs, node, before, 3*time.Minute)
	if err := syscall.Kill(pid, 0); err == nil {
		if st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); !strings.Contains(string(st), ") Z ") {
			t.Errorf("the stopped agent (PID %d) still exists after its container was restarted", pid)
		}
	}
	final, served := waitOneResponder(t, ctx, client, addrs, 30*time.Second)
	time.Sleep(3 * time.Second)
	lstop()
	load.Wait()
	audit := arp.end(t)
	ok, fail, failures := load.Totals()
	t.Logf("demo pods on %s seen not Ready while its agent was stopped: %v", node, evictions())
	st := after.Status.ContainerStatuses[0]
	if st.LastTerminationState.Terminated == nil || st.State.Running == nil {
		t.Fatalf("agent on %s restarted without a terminated and a running state: %+v", node, st)
	}
	ended := st.LastTerminationState.Terminated.FinishedAt.Sub(stopped)
	t.Logf("wedged agent: stop → container ended %v (exit %d), → new container started %v, → Ready %v (restarts %d → %d); "+
		"addresses answered again %v after the stop (before %v, after %v); ARP audit: %s; client 20 req/s: %d ok, %d failed %v; events: %s",
		ended.Round(time.Second), st.LastTerminationState.Terminated.ExitCode, st.State.Running.StartedAt.Sub(stopped).Round(time.Second),
		ready.Sub(stopped).Round(100*time.Millisecond), before.Status.ContainerStatuses[0].RestartCount, st.RestartCount,
		served.Sub(stopped).Round(100*time.Millisecond), owners, final, audit, ok, fail, failures, probeEvents(cs, after.Name))
	// The chart's probe (3 failures 5 s apart, 2 s timeout, 2 s grace)
	// ends a wedged agent 19 s after the wedge at the latest; the
	// defaults before it (10 s apart, 1 s, the pod's 10 s) took 38 s here.
	// Container times have whole seconds, the kubelet's loops add a few.
	if ended > 30*time.Second {
		t.Errorf("the wedged agent's container ended %v after the stop, want within 30 s (the chart's probe: 19 s)", ended.Round(time.Second))
	}
}

// watchNotReady polls the demo pods on node until ctx ends and returns a
// function that lists the first time each was seen not Ready, with the
// condition's reason, and the pods watched (MooringNodeUnreachable: the peers declared the node
// lost and evicted its endpoints).
func watchNotReady(ctx context.Context, cs kubernetes.Interface, node string) func() []string {
	var mu sync.Mutex
	seen := map[string]string{}
	watched := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			pods, err := cs.CoreV1().Pods(lab.DemoNamespace).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
			for _, p := range podItems(pods, err) {
				mu.Lock()
				watched[p.Name] = true
				mu.Unlock()
				for _, c := range p.Status.Conditions {
					mu.Lock()
					if _, ok := seen[p.Name]; !ok && c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
						seen[p.Name] = fmt.Sprintf("%s %s (%s)", time.Now().Format("15:04:05.000"), p.Name, c.Reason)
					}
					mu.Unlock()
				}
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	return func() []string {
		<-done
		mu.Lock()
		defer mu.Unlock()
		return append(slices.Sorted(maps.Values(seen)), fmt.Sprintf("(%d pods watched: %v)", len(watched), slices.Sorted(maps.Keys(watched))))
	}
}

func podItems(pods *corev1.PodList, err error) []corev1.Pod {
	if err != nil || pods == nil {
		return nil
	}
	return pods.Items
}

// waitAgentRestarted waits until node's agent pod (the same pod: a
// container restart, not a new pod) counts one more restart and is Ready;
// it returns the pod and when it was seen Ready.
func waitAgentRestarted(t *testing.T, cs kubernetes.Interface, node string, before corev1.Pod, limit time.Duration) (corev1.Pod, time.Time) {
	t.Helper()
	n0 := before.Status.ContainerStatuses[0].RestartCount
	deadline := time.Now().Add(limit)
	for {
		p := agentPod(t, cs, node)
		if p.UID != before.UID {
			t.Fatalf("the agent pod on %s was replaced (%s → %s), not its container restarted", node, before.Name, p.Name)
		}
		if st := p.Status.ContainerStatuses[0]; st.RestartCount > n0 && st.Ready && podReady(p) {
			return p, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("the stopped agent on %s was not restarted within %v: restarts %d, ready %v; events: %s",
				node, limit, p.Status.ContainerStatuses[0].RestartCount, podReady(p), probeEvents(cs, p.Name))
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// waitOneResponder waits until every address has exactly one responder and
// returns them and when.
func waitOneResponder(t *testing.T, ctx context.Context, client *netlab.Host, addrs []netip.Addr, limit time.Duration) (map[netip.Addr]string, time.Time) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		macs, err := labtest.OneResponderEach(ctx, client, addrs)
		if err == nil {
			return macs, time.Now()
		}
		if time.Now().After(deadline) {
			t.Fatalf("addresses not answered by exactly one node %v after the restart: %v", limit, err)
		}
	}
}

// probeEvents are the kubelet's probe and kill Events of pod, oldest first.
func probeEvents(cs kubernetes.Interface, pod string) string {
	evs, err := cs.CoreV1().Events(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=" + pod})
	if err != nil {
		return err.Error()
	}
	slices.SortFunc(evs.Items, func(a, b corev1.Event) int { return eventTime(a).Compare(eventTime(b)) })
	var out []string
	for _, e := range evs.Items {
		if e.Reason == "Unhealthy" || e.Reason == "Killing" || e.Reason == "Started" {
			out = append(out, fmt.Sprintf("%s %s ×%d %q", eventTime(e).Format("15:04:05"), e.Reason, e.Count, e.Message))
		}
	}
	return strings.Join(out, "; ")
}

func eventTime(e corev1.Event) time.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp.Time
	}
	return e.EventTime.Time
}
