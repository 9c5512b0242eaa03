package migrate_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
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
// the pre-check and names the node and the fix. Then the run: ARP/NDP
// responders counted and named at every step (every responder an
// announcer; exactly Mooring's owner at the end), no request fails but for
// connections reset by an announcer move (at most one per moved address;
// see below), no address changes, MetalLB's processes and objects are gone.
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
	responders := func(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
		return labtest.Responders(ctx, clientHost, addrs)
	}
	dir := t.TempDir()

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
	var out strings.Builder
	st.Runner.Out, st.Runner.Responders = stampWriter{&out}, responders
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
	// Where Mooring's owner is another node than MetalLB's speaker, the
	// address moves once (clients follow the new owner's gratuitous ARP).
	// A TCP connection in flight through the old node at that instant is
	// reset: the new node's conntrack picks up its next segment and
	// kube-proxy NATs it afresh, so the pod answers RST — as in any
	// failover. The load opens a new connection per request (a few ms of
	// every 125 ms), so a move catches one now and then. Anything else (a
	// timeout, a refused connection: an address nobody answers for) fails.
	final, err := labtest.OneResponderEach(ctx, clientHost, addrs)
	if err != nil {
		t.Errorf("after the migration: %v", err)
	}
	moved := 0
	for _, a := range addrs {
		if final[a] != macs[a] {
			moved++
		}
	}
	ok, fail, failures := load.Totals()
	t.Logf("migration took %v; 10 Services × 8 req/s: %d ok, %d failed (%d of 10 addresses moved node); addresses %v",
		took.Round(time.Millisecond), ok, fail, moved, before)
	resets := 0
	for _, f := range failures {
		if strings.Contains(f, "connection reset by peer") {
			resets++
		}
	}
	if resets != fail || fail > moved || ok < 10*8*5 {
		t.Errorf("traffic: %d ok, %d failed (%d resets, %d addresses moved): %v", ok, fail, resets, moved, failures)
	} else if fail > 0 {
		t.Logf("connections reset by an announcer move: %v", failures)
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
