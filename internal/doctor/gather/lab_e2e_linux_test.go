package gather_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	clidoctor "github.com/mooringlb/mooring/internal/cli/doctor"
	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/doctor/gather"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

const envSelf = "MOORING_DOCTOR_TEST_SELF"

func TestMain(m *testing.M) { labtest.Main(m, envSelf) }

// labDoctor runs doctor against a lab as an operator on its client
// machine would: agents' metrics and /readyz over HTTP from the client
// namespace, the ARP/NDP audit from the client's eth0.
type labDoctor struct {
	t   *testing.T
	ctx context.Context
	r   *lab.Ready
	cs  kubernetes.Interface
	dc  dynamic.Interface
	cl  client.Client
	opt gather.Options
}

func newLabDoctor(t *testing.T, ctx context.Context, r *lab.Ready) *labDoctor {
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	must(t, err)
	d := &labDoctor{t: t, ctx: ctx, r: r}
	d.cs, err = kubernetes.NewForConfig(rc)
	must(t, err)
	d.dc, err = dynamic.NewForConfig(rc)
	must(t, err)
	d.cl, err = client.New(rc, client.Options{Scheme: kube.Scheme()})
	must(t, err)
	d.opt = labtest.DoctorOptions(r, d.cl)
	return d
}

func (d *labDoctor) run() []doctor.Finding {
	d.t.Helper()
	in, err := gather.Gather(d.ctx, d.cs, d.dc, d.opt)
	must(d.t, err)
	return doctor.Run(in)
}

// waitFor runs doctor until ok holds, and returns those findings.
func (d *labDoctor) waitFor(what string, timeout time.Duration, ok func([]doctor.Finding) bool) []doctor.Finding {
	d.t.Helper()
	var fs []doctor.Finding
	for deadline := time.Now().Add(timeout); ; time.Sleep(500 * time.Millisecond) {
		if fs = d.run(); ok(fs) {
			return fs
		}
		if time.Now().After(deadline) {
			d.t.Fatalf("%s: not within %v:\n%s", what, timeout, dump(fs))
		}
	}
}

func has(fs []doctor.Finding, sev doctor.Severity, check, node string, mention ...string) bool {
	return slices.ContainsFunc(fs, func(f doctor.Finding) bool {
		if f.Severity != sev || f.Check != check || (node != "" && f.Node != node) {
			return false
		}
		for _, m := range mention {
			if !strings.Contains(f.Message, m) {
				return false
			}
		}
		return true
	})
}

// TestDoctorInLab: the real lab with Mooring's controller and agents is
// clean to doctor; then, each alone, a pool off the nodes' segment, an
// agent on an old configuration, a stale local copy of the LoadBalancer
// address (current: the agent's gauge and the audit), the same after it
// is gone (history), with the agents' metrics blocked (exit 0: history
// and metrics-unreachable warnings; exit 1 once the stale copy answers
// again, seen by the audit), and seed 004's fault: an agent that cannot
// open its ARP/NDP sockets and retries while it runs.
func TestDoctorInLab(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Mooring: true, LogLevel: slog.LevelWarn})
	d := newLabDoctor(t, ctx, r)
	lb, owner := d.waitAnnounced()
	fs := d.waitFor("clean lab", 30*time.Second, func(fs []doctor.Finding) bool {
		return !slices.ContainsFunc(fs, func(f doctor.Finding) bool { return f.Severity != doctor.Info })
	})
	var out bytes.Buffer
	must(t, clidoctor.Print(&out, "table", fs, false))
	if strings.TrimSpace(out.String()) != "no problems found" {
		t.Fatalf("clean lab printed:\n%s", out.String())
	}
	d.offSegmentPool()
	d.oldConfiguration(owner)
	// While it was stopped a peer may have taken the address, and kept
	// it: the stale copy must go on a node that does not announce it now
	// (CI once planted it on the new owner, whose own MAC then answered
	// alone, and the audit rightly saw one responder).
	// Read until two readings 2 s apart agree (the stopped agent's hold-down
	// ends meanwhile).
	for prev := ""; prev != owner; {
		prev = owner
		time.Sleep(2 * time.Second)
		lb, owner = d.waitAnnounced()
	}
	other := "node-1"
	if owner == other {
		other = "node-2"
	}
	d.staleNowAndThen(lb, owner, other)
	d.responderFault(owner)
}

// waitAnnounced waits until an agent announces the demo Service and
// returns its IPv4 address and the announcing node.
func (d *labDoctor) waitAnnounced() (netip.Addr, string) {
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		svc, err := d.cs.CoreV1().Services(d.r.Service.Namespace).Get(d.ctx, d.r.Service.Name, metav1.GetOptions{})
		must(d.t, err)
		ann, err := gather.Announced(d.ctx, d.cl)
		must(d.t, err)
		for _, in := range svc.Status.LoadBalancer.Ingress {
			if a := netip.MustParseAddr(in.IP); a.Is4() && ann[a] != "" {
				return a, ann[a]
			}
		}
		if time.Now().After(deadline) {
			d.t.Fatal("no agent announced the demo Service")
		}
	}
}

func (d *labDoctor) offSegmentPool() {
	far := &unstructured.Unstructured{Object: map[string]any{"apiVersion": mooringv1.GroupVersion.String(), "kind": "LoadBalancerIPPool",
		"metadata": map[string]any{"name": "far"}, "spec": map[string]any{"blocks": []any{map[string]any{"cidr": "198.51.100.0/28"}}}}}
	_, err := d.dc.Resource(poolGVR).Create(d.ctx, far, metav1.CreateOptions{})
	must(d.t, err)
	if p := problems(d.run()); len(p) != 1 || p[0].Check != "pool-subnet" || !strings.Contains(p[0].Message, "198.51.100.0-198.51.100.15") {
		d.t.Fatalf("off-segment pool: %s", dump(p))
	}
	must(d.t, d.dc.Resource(poolGVR).Delete(d.ctx, "far", metav1.DeleteOptions{}))
}

// oldConfiguration: node's agent stopped (SIGSTOP), then the policy
// changed (a serviceSelector every Service matches, so nothing else
// changes): doctor names node at the old generation; after SIGCONT it is
// clean again. While stopped its metrics cannot be read (a warning) and
// the audit may see its addresses unanswered until a peer takes them.
func (d *labDoctor) oldConfiguration(node string) {
	t := d.t
	pid := agentPID(t, d.r.Cluster.Host(node), node)
	must(t, unix.Kill(pid, unix.SIGSTOP))
	cont := sync.OnceFunc(func() { _ = unix.Kill(pid, unix.SIGCONT) })
	defer cont()
	pols, err := d.dc.Resource(policyGVR).List(d.ctx, metav1.ListOptions{})
	must(t, err)
	if len(pols.Items) == 0 {
		t.Fatal("the lab has no L2AnnouncementPolicy")
	}
	pol := pols.Items[0].GetName()
	_, err = d.dc.Resource(policyGVR).Patch(d.ctx, pol, types.MergePatchType,
		[]byte(`{"spec":{"serviceSelector":{"matchExpressions":[{"key":"lab.mooring.dev/none","operator":"DoesNotExist"}]}}}`), metav1.PatchOptions{})
	must(t, err)
	fs := d.waitFor("an agent on an old configuration", 30*time.Second, func(fs []doctor.Finding) bool {
		return has(fs, doctor.Problem, "agent-config", node, "L2AnnouncementPolicy "+pol+" is at generation 1, the cluster's at 2")
	})
	if !has(fs, doctor.Warning, "agent-metrics", node, "unreachable") {
		t.Errorf("a stopped agent's metrics: %s", dump(fs))
	}
	cont()
	d.waitFor("after SIGCONT", 30*time.Second, func(fs []doctor.Finding) bool { return len(problems(fs)) == 0 })
}

// staleNowAndThen: a stale copy of lb on other's lo with arp_ignore=0 is
// current (the agent's gauge, the audit's second MAC); once removed, its
// Event is history; with the agents' metrics blocked, doctor exits 0
// with history lines and metrics-unreachable warnings; planted again, the
// audit sees it now and doctor exits 1.
func (d *labDoctor) staleNowAndThen(lb netip.Addr, owner, other string) {
	t := d.t
	h := d.r.Cluster.Host(other)
	must(t, h.Sysctl("net.ipv4.conf.all.arp_ignore", "0"))
	stale := netip.PrefixFrom(lb, 32)
	must(t, h.AddAddr("lo", stale))
	fs := d.waitFor("a stale local address", 60*time.Second, func(fs []doctor.Finding) bool {
		return has(fs, doctor.Problem, "stale-local-address", other, lb.String(), "counts 1 now")
	})
	if !has(fs, doctor.Problem, "arp-audit", other, "foreign MAC "+h.MAC.String(), lb.String()) {
		t.Errorf("the audit did not name %s's MAC for %s:\n%s", other, lb, dump(fs))
	}
	must(t, h.DelAddr("lo", stale))
	fs = d.waitFor("the stale address removed", 60*time.Second, func(fs []doctor.Finding) bool { return len(problems(fs)) == 0 })
	if !has(fs, doctor.History, "stale-local-address", other, "history:", "the agent on "+other+" counts none now") {
		t.Errorf("the old Event is not shown as history:\n%s", dump(fs))
	}

	unblock := blockAgentMetrics(t, d.r.Cluster.Host(d.r.From))
	fs = d.run()
	var out bytes.Buffer
	must(t, clidoctor.Print(&out, "table", fs, false))
	t.Logf("metrics blocked, only an old Event (exit %v):\n%s", doctor.HasProblem(fs), out.String())
	if doctor.HasProblem(fs) || !has(fs, doctor.History, "stale-local-address", other, "cannot be read", "at most one responder") ||
		!has(fs, doctor.Warning, "agent-metrics", owner, "agent metrics unreachable") || !has(fs, doctor.Warning, "agent-metrics", other, "agent metrics unreachable") ||
		!strings.Contains(out.String(), "history") {
		t.Fatalf("metrics blocked, only an old Event: want exit 0 with history and metrics-unreachable:\n%s", dump(fs))
	}
	must(t, h.AddAddr("lo", stale))
	fs = d.waitFor("the stale address back, metrics blocked", 30*time.Second, func(fs []doctor.Finding) bool {
		return has(fs, doctor.Problem, "stale-local-address", "", "seen now by the ARP/NDP audit", h.MAC.String())
	})
	t.Logf("planted again, seen by the audit: %s", dump(problems(fs)))
	must(t, h.DelAddr("lo", stale))
	unblock()
	d.waitFor("clean again", 60*time.Second, func(fs []doctor.Finding) bool { return len(problems(fs)) == 0 })
}

// blockAgentMetrics drops the client namespace's connections to the
// agents' metrics port (a firewall in the way); the returned func lifts it.
func blockAgentMetrics(t *testing.T, h *netlab.Host) func() {
	t.Helper()
	nft := func(script string) { must(t, h.Nft(script)) }
	nft("table inet mooring_test_block {\n chain out {\n  type filter hook output priority 0; policy accept;\n  tcp dport " +
		strconv.Itoa(labtest.AgentMetricsPort) + " drop\n }\n}\n")
	return sync.OnceFunc(func() { nft("delete table inet mooring_test_block\n") })
}

var (
	poolGVR   = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "loadbalancerippools"}
	policyGVR = schema.GroupVersionResource{Group: mooringv1.GroupVersion.Group, Version: mooringv1.GroupVersion.Version, Resource: "l2announcementpolicies"}
)

// agentPID finds the lab's `mooring agent --node-name=node` process in h's
// network namespace (other labs on the machine may have a node of that name).
func agentPID(t *testing.T, h *netlab.Host, node string) int {
	t.Helper()
	var want unix.Stat_t
	must(t, unix.Fstat(int(h.NS()), &want))
	ents, err := os.ReadDir("/proc")
	must(t, err)
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(string(b), "\x00")
		if !slices.Contains(args, "agent") || !slices.Contains(args, "--node-name="+node) {
			continue
		}
		var got unix.Stat_t
		if unix.Stat(filepath.Join("/proc", e.Name(), "ns", "net"), &got) == nil && got.Ino == want.Ino && got.Dev == want.Dev {
			return pid
		}
	}
	t.Fatalf("no agent process for %s in its namespace", node)
	return 0
}
