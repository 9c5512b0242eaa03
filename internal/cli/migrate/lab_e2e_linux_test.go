package migrate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/mooringlb/mooring/internal/cli/migrate"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/migrate/cluster"
)

const envSelf = "MOORING_MIGRATE_TEST_SELF"

func TestMain(m *testing.M) { labtest.Main(m, envSelf) }

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestMigrateInLab walks the whole migration off the REAL MetalLB
// (controller and speakers built by hack/metallb, run by the lab) to
// Mooring's real controller (--adopt-only) and agents, on 3 nodes with 10
// LoadBalancer Services MetalLB gave addresses to, each under 8 requests/s
// from the client namespace. First a stale kube-ipvs0-style copy of one
// address on a node that does not announce it: the migration refuses at
// the pre-check and names the node and the fix. Then the run with the
// imported policies (ranking: MetalLB): ARP/NDP responders counted and
// named at every step, and every one of them, at every step, is the node
// MetalLB's speaker answered from before the migration (no address moves:
// one responder per address throughout); not one request fails; no address
// changes; MetalLB's processes and objects are gone. Before and during it,
// doctor lists MetalLB's speakers (and, before, the foreign MACs) and
// status names MetalLB as the announcer; after it, and after the
// controller's restart without --adopt-only, both are clean and plan says
// nothing is left once the commands it prints have run.
func TestMigrateInLab(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, Mooring: true, MetalLB: true, LogLevel: slog.LevelWarn})
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	must(t, err)
	cs, err := kubernetes.NewForConfig(rc)
	must(t, err)
	dc, err := dynamic.NewForConfig(rc)
	must(t, err)
	cl, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	must(t, err)
	clientHost := r.Cluster.Host(r.From)
	if clientHost == nil {
		t.Fatalf("no lab host %q", r.From)
	}
	addrs := labtest.LBServices(t, ctx, cs, 10, 60*time.Second)
	var macs map[netip.Addr]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if macs, err = labtest.OneResponderEach(ctx, clientHost, addrs); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("MetalLB's responders: %v", err)
		}
	}
	// seen records every responder the runner's checks observed, per
	// address, to prove no address ever answered from another node.
	var seenMu sync.Mutex
	seen := map[netip.Addr]map[string]time.Time{} // MAC -> first seen
	responders := func(ctx context.Context, probe []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
		got, err := labtest.Responders(ctx, clientHost, probe)
		seenMu.Lock()
		defer seenMu.Unlock()
		for _, a := range addrs {
			for _, m := range got[a] {
				if seen[a] == nil {
					seen[a] = map[string]time.Time{}
				}
				if _, ok := seen[a][m.String()]; !ok {
					seen[a][m.String()] = time.Now()
				}
			}
		}
		return got, err
	}
	dir := t.TempDir()
	v := newViews(t, r, cs, dc, cl)
	v.metallbServes(ctx, "before the migration", false)

	// 1. A stale copy of addrs[0] on a node MetalLB does not announce it
	// from, with arp_ignore=0: that node answers ARP too.
	lb := addrs[0]
	var staleNode string
	for _, h := range []string{"node-1", "node-2", "node-3"} {
		if r.Cluster.Host(h).MAC.String() != macs[lb] {
			staleNode = h
			break
		}
	}
	stale := r.Cluster.Host(staleNode)
	must(t, stale.Sysctl("net.ipv4.conf.all.arp_ignore", "0"))
	must(t, stale.AddAddr("lo", netip.PrefixFrom(lb, 32)))
	so := migrate.Options{Namespace: lab.MetalLBNamespace, ImportFile: filepath.Join(dir, "stale.yaml"), SaveDir: filepath.Join(dir, "stale-saved"), CheckTimeout: time.Second}
	so.SetReader(cl)
	sst, err := migrate.Prepare(ctx, so, cs, dc, io.Discard)
	must(t, err)
	var staleOut strings.Builder
	sst.Runner.Out, sst.Runner.Responders = &staleOut, responders
	err = sst.Runner.Run(ctx, sst.Steps)
	if err == nil || !strings.Contains(err.Error(), "pre-check failed, nothing was changed") || !strings.Contains(err.Error(), staleNode+" answers although it announces nothing") ||
		!strings.Contains(err.Error(), "arp_ignore=1") {
		t.Fatalf("stale address on %s: err %v\n%s", staleNode, err, staleOut.String())
	}
	t.Logf("with a stale address on %s: %v", staleNode, err)
	// The operator removes it.
	must(t, stale.DelAddr("lo", netip.PrefixFrom(lb, 32)))

	// 2. The migration, under load.
	o := migrate.Options{Namespace: lab.MetalLBNamespace, ImportFile: filepath.Join(dir, "mooring.yaml"), SaveDir: filepath.Join(dir, "saved"),
		CheckTimeout: 30 * time.Second}
	o.SetReader(cl)
	st, err := migrate.Prepare(ctx, o, cs, dc, io.Discard)
	must(t, err)
	if imported, err := os.ReadFile(o.ImportFile); err != nil || !strings.Contains(string(imported), "ranking: MetalLB") {
		t.Fatalf("imported policies without ranking: MetalLB (%v):\n%s", err, imported)
	}
	seenMu.Lock()
	clear(seen) // the stale run above saw the stale node
	seenMu.Unlock()
	var out strings.Builder
	st.Runner.Out, st.Runner.Responders = stampWriter{&out}, responders
	st.Runner.AfterStep = func(ctx context.Context, i int) {
		if i == 1 { // Mooring's pools and policies applied, MetalLB still runs
			v.metallbServes(ctx, "during the migration", true)
		}
	}
	lctx, lcancel := context.WithCancel(ctx)
	load := &labtest.Load{Host: clientHost, URLs: labtest.URLs(addrs), Interval: 125 * time.Millisecond, Timeout: 3 * time.Second}
	load.Start(lctx)
	time.Sleep(2 * time.Second) // traffic before the first step
	before := st.Runner.Snapshot.Lines()
	start := time.Now()
	err = st.Runner.Run(ctx, st.Steps)
	took := time.Since(start)
	time.Sleep(2 * time.Second) // and after the last
	lcancel()
	load.Wait()
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	// With ranking: MetalLB every agent takes over on the node whose
	// speaker announced the address, so no address moves and no TCP
	// connection in flight is reset (conntrack is per node: a move would
	// reset them). Every failure, of any kind, fails the test.
	final, err := labtest.OneResponderEach(ctx, clientHost, addrs)
	if err != nil {
		t.Errorf("after the migration: %v", err)
	}
	moved := 0
	for _, a := range addrs {
		if final[a] != macs[a] {
			moved++
			t.Errorf("%s moved: answered by %s before the migration (MetalLB), by %s after", a, macs[a], final[a])
		}
		seenMu.Lock()
		for m, at := range seen[a] {
			if m != macs[a] {
				t.Errorf("%s answered by %s during the migration (first seen %s); MetalLB's node is %s", a, m, at.Format("15:04:05.000"), macs[a])
			}
		}
		if len(seen[a]) == 0 {
			t.Errorf("%s: the runner counted no responder", a)
		}
		seenMu.Unlock()
	}
	ok, fail, failures := load.Totals()
	t.Logf("migration took %v; 10 Services × 8 req/s: %d ok, %d failed (%d of 10 addresses moved node); addresses %v",
		took.Round(time.Millisecond), ok, fail, moved, before)
	if fail > 0 || ok < 10*8*5 {
		t.Errorf("traffic: %d ok, %d failed: %v", ok, fail, failures)
	}
	after, err := cluster.TakeSnapshot(ctx, cs)
	must(t, err)
	if strings.Join(after.Lines(), " ") != strings.Join(before, " ") {
		t.Errorf("addresses changed: %v -> %v", before, after.Lines())
	}
	for what, err := range map[string]error{
		"speaker DaemonSet":     errOf(cs.AppsV1().DaemonSets(lab.MetalLBNamespace).Get(ctx, lab.MetalLBSpeaker, metav1.GetOptions{})),
		"controller Deployment": errOf(cs.AppsV1().Deployments(lab.MetalLBNamespace).Get(ctx, lab.MetalLBController, metav1.GetOptions{})),
	} {
		if !apierrors.IsNotFound(err) {
			t.Errorf("%s not removed: %v", what, err)
		}
	}
	if pods, err := cs.CoreV1().Pods(lab.MetalLBNamespace).List(ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("MetalLB pods left: %v %v", err, pods)
	}
	v.afterMigration(ctx)
}

func errOf[T any](_ T, err error) error { return err }

// stampWriter prefixes what the runner prints with the time, to line the
// steps up with the load's failures.
type stampWriter struct{ w io.Writer }

func (s stampWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(s.w, "%s %s", time.Now().Format("15:04:05.000"), b); err != nil {
		return 0, err
	}
	return len(b), nil
}
