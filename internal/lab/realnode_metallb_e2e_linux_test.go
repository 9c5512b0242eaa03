package lab_test

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/migrate/cluster"
	"github.com/mooringlb/mooring/internal/netlab"
)

// TestRealNodesMetalLBMigrate is the MetalLB hand-over on real nodes:
// `lab up --runtime=containerd --install=chart --metallb` installs MetalLB
// v0.16.2 from its own manifest (its controller and speakers run by the
// real kubelets from images hack/metallb builds of its binaries, its
// webhook, certificate rotation and RBAC its own) and Mooring from the
// chart with the controller --adopt-only; MetalLB gives 6 Services their
// addresses (the demo Service and 5 more: its speakers announce them from
// all three nodes). Then the real command, `mooring migrate metallb run
// --interface eth0 --probe URL`, runs in the client namespace while the
// client sends 8 requests/s to each IPv4 address (48/s)
// and an ARP audit polls the responders: the command succeeds, no request
// fails, no address changes, no address is ever answered from another
// node than MetalLB's speaker answered from (ranking: MetalLB), never two
// responders, and MetalLB's Deployment, DaemonSet and pods are gone.
func TestRealNodesMetalLBMigrate(t *testing.T) {
	cfg := requireRealNodes(t, lab.InstallChart)
	cfg.MetalLB = lab.FindMetalLB()
	if err := cfg.Validate(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("MetalLB on real nodes cannot run: %v", err)
		}
		t.Skipf("MetalLB on real nodes cannot run: %v", err)
	}
	r, _ := runRealLab(t, cfg)
	cs := realClient(t, r)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	waitChartPodsReady(t, cs, 2*time.Minute)
	waitPodsReady(t, cs, lab.MetalLBNamespace, 4, 2*time.Minute) // the controller and 3 speakers
	client := r.Cluster.Host(netlab.ClientName)
	addrs := append(serviceAddrs(t, r)[:1], labtest.LBServices(t, ctx, cs, 5, 2*time.Minute)...)
	macs := waitMetalLBResponders(t, ctx, client, addrs)
	if nodes := distinct(macs); nodes < 2 {
		t.Fatalf("MetalLB announces all %d addresses from %d node: the hand-over would not be shown across nodes", len(addrs), nodes)
	}
	before, err := cluster.TakeSnapshot(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	// A warm-up first (as in TestLabMetalLB): a Service's first
	// connections can meet a node before kube-proxy programmed its address.
	warmUp(ctx, client, addrs)

	since := time.Now()
	arp := startARPAudit(ctx, client, addrs)
	load := &labtest.Load{Host: client, URLs: labtest.URLs(addrs), Interval: 125 * time.Millisecond, Timeout: 3 * time.Second}
	lctx, lstop := context.WithCancel(ctx)
	load.Start(lctx)
	time.Sleep(2 * time.Second) // traffic before the first step
	out, took, err := runMigrateCommand(t, cfg, client, addrs[0])
	time.Sleep(2 * time.Second) // and after the last
	lstop()
	load.Wait()
	audit := arp.end(t)
	t.Logf("mooring migrate metallb run:\n%s", out)
	if err != nil {
		t.Errorf("mooring migrate metallb run: %v", err)
	}
	ok, fail, failures := load.Totals()
	t.Logf("hand-over took %v; %d Services × 8 req/s: %d ok, %d failed; ARP audit: %s", took.Round(time.Millisecond), len(addrs), ok, fail, audit)
	if fail > 0 || ok < len(addrs)*8*int(took.Seconds())/2 {
		t.Errorf("traffic: %d ok, %d failed: %v", ok, fail, failures)
	}
	if len(arp.moves) > 0 {
		t.Errorf("addresses moved node during the hand-over: %v", arp.moves)
	}
	final, err := labtest.OneResponderEach(ctx, client, addrs)
	if err != nil {
		t.Errorf("after the hand-over: %v", err)
	}
	for _, a := range addrs {
		if final[a] != macs[a] {
			t.Errorf("%s moved: answered by %s before (MetalLB), by %s after", a, macs[a], final[a])
		}
	}
	after, err := cluster.TakeSnapshot(ctx, cs)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(after.Lines(), " ") != strings.Join(before.Lines(), " ") {
		t.Errorf("addresses changed: %v -> %v", before.Lines(), after.Lines())
	}
	checkMetalLBGone(t, ctx, cs)
	if t.Failed() {
		dumpAgentLogs(t, cs, since)
	}
}

// dumpAgentLogs logs the chart's agents' lines since start (the lab's
// folders go with it): who announced what, and why.
func dumpAgentLogs(t *testing.T, cs kubernetes.Interface, start time.Time) {
	pods, err := cs.CoreV1().Pods(lab.ChartNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Log(err)
		return
	}
	for _, p := range pods.Items {
		b, err := cs.CoreV1().Pods(p.Namespace).GetLogs(p.Name, &corev1.PodLogOptions{SinceTime: &metav1.Time{Time: start}}).DoRaw(context.Background())
		t.Logf("%s on %s since %s (%v):\n%s", p.Name, p.Spec.NodeName, start.Format("15:04:05"), err, b)
	}
}

// waitMetalLBResponders waits until every address has exactly one ARP
// responder (MetalLB's speakers settle who announces over memberlist).
func waitMetalLBResponders(t *testing.T, ctx context.Context, client *netlab.Host, addrs []netip.Addr) map[netip.Addr]string {
	t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(500 * time.Millisecond) {
		macs, err := labtest.OneResponderEach(ctx, client, addrs)
		if err == nil {
			t.Logf("MetalLB's responders: %v", macs)
			return macs
		}
		if time.Now().After(deadline) {
			t.Fatalf("MetalLB's responders: %v", err)
		}
	}
}

func warmUp(ctx context.Context, client *netlab.Host, addrs []netip.Addr) {
	wctx, stop := context.WithTimeout(ctx, 2*time.Second)
	defer stop()
	warm := &labtest.Load{Host: client, URLs: labtest.URLs(addrs), Interval: 250 * time.Millisecond, Timeout: 3 * time.Second}
	warm.Start(wctx)
	warm.Wait()
}

// runMigrateCommand runs `mooring migrate metallb run` (this test binary
// is mooring under envSelf) in the client namespace, as an operator on
// the Services' segment runs it, with the in-lab kubeconfig, and returns
// its output, how long it ran and its error.
func runMigrateCommand(t *testing.T, cfg lab.Config, client *netlab.Host, probe netip.Addr) (string, time.Duration, error) {
	t.Helper()
	dir := t.TempDir()
	cmd := exec.Command(cfg.Self, "migrate", "metallb", "run",
		"--kubeconfig", filepath.Join(cfg.StateDir, "cluster.kubeconfig"),
		"--interface", "eth0",
		"--probe", "http://"+netip.AddrPortFrom(probe, lab.DemoPort).String()+"/", "--probe-interval", "100ms", "--probe-timeout", "3s",
		"--import-file", filepath.Join(dir, "mooring.yaml"), "--save-dir", filepath.Join(dir, "saved"),
		"--check-timeout", "90s")
	cmd.Env = append(os.Environ(), cfg.SelfEnv...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	p, err := client.Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Minute):
		_ = p.Kill()
		<-p.Done()
		return out.String(), time.Since(start), fmt.Errorf("still running after 5 minutes: killed")
	}
	return out.String(), time.Since(start), p.Wait()
}

// checkMetalLBGone: MetalLB's Deployment, DaemonSet and pods are gone.
func checkMetalLBGone(t *testing.T, ctx context.Context, cs kubernetes.Interface) {
	t.Helper()
	for what, err := range map[string]error{
		"speaker DaemonSet":     errOf(cs.AppsV1().DaemonSets(lab.MetalLBNamespace).Get(ctx, lab.MetalLBSpeaker, metav1.GetOptions{})),
		"controller Deployment": errOf(cs.AppsV1().Deployments(lab.MetalLBNamespace).Get(ctx, lab.MetalLBController, metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s not removed: %v", what, err)
		}
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		pods, err := cs.CoreV1().Pods(lab.MetalLBNamespace).List(ctx, metav1.ListOptions{})
		if err == nil && len(pods.Items) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("MetalLB pods left a minute after the hand-over: %v %s", err, podSummary(pods))
			return
		}
	}
}

func errOf[T any](_ T, err error) error { return err }

func distinct(m map[netip.Addr]string) int {
	seen := map[string]bool{}
	for _, v := range m {
		seen[v] = true
	}
	return len(seen)
}
