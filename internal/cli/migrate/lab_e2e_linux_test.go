package migrate_test

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
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

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/arpprobe"
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

// TestMigrateInLab walks the whole migration in the real lab, with
// Mooring's real controller and agents: MetalLB's pieces exist as API
// objects (no real MetalLB runs: building it is not done), its pool holds
// the demo Service's address. Requests from the client namespace to the
// LoadBalancer address every 50 ms and ARP/NDP responders counted from the
// client's eth0 at every step: no request fails, the address never
// changes, one responder per address, MetalLB's objects are gone.
func TestMigrateInLab(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Mooring: true, LogLevel: slog.LevelWarn})
	rc, err := clientcmd.BuildConfigFromFlags("", r.Kubeconfig)
	must(t, err)
	cs, err := kubernetes.NewForConfig(rc)
	must(t, err)
	dc, err := dynamic.NewForConfig(rc)
	must(t, err)
	cl, err := client.New(rc, client.Options{Scheme: kube.Scheme()})
	must(t, err)
	migrate.InstallMetalLBPool(t, cs, dc, lab.PoolRange4[0].String()+"-"+lab.PoolRange4[1].String())

	clientHost := r.Cluster.Host(r.From)
	if clientHost == nil {
		t.Fatalf("no lab host %q", r.From)
	}
	ifi, err := clientHost.Interface()
	must(t, err)
	dir := t.TempDir()

	// First a stale kube-ipvs0-style copy of the address on node-2: the
	// migration must refuse to start and name the node.
	lb := netip.MustParseAddr(strings.TrimSuffix(strings.TrimPrefix(r.URL, "http://"), "/"))
	node2 := r.Cluster.Host("node-2")
	must(t, node2.Do(func() error { return os.WriteFile("/proc/sys/net/ipv4/conf/all/arp_ignore", []byte("0"), 0) }))
	must(t, node2.AddAddr("lo", netip.PrefixFrom(lb, 32)))
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "reason=" + mooringv1.EventReasonStaleLocalAddress})
		must(t, err)
		if len(evs.Items) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent on node-2 did not report the stale address within 60 s")
		}
	}
	stale := migrate.Options{Namespace: "metallb-system", ImportFile: filepath.Join(dir, "stale.yaml"), SaveDir: filepath.Join(dir, "stale-saved"), CheckTimeout: time.Second}
	stale.SetReader(cl)
	var staleOut strings.Builder
	err = migrate.Run(ctx, stale, cs, dc, &staleOut, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "pre-check failed, nothing was changed") || !strings.Contains(err.Error(), "node-2") {
		t.Fatalf("stale address on node-2: err %v\n%s", err, staleOut.String())
	}
	t.Logf("with a stale address on node-2: %v", err)
	// The operator removes it; the agent's old reports go with it.
	must(t, node2.DelAddr("lo", netip.PrefixFrom(lb, 32)))
	must(t, cs.CoreV1().Events("default").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{FieldSelector: "reason=" + mooringv1.EventReasonStaleLocalAddress}))

	o := migrate.Options{Namespace: "metallb-system", ImportFile: filepath.Join(dir, "mooring.yaml"), SaveDir: filepath.Join(dir, "saved"),
		CheckTimeout: 30 * time.Second}
	o.SetReader(cl)
	st, err := migrate.Prepare(ctx, o, cs, dc, io.Discard)
	must(t, err)
	var out strings.Builder
	st.Runner.Out = &out
	st.Runner.Responders = func(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error) {
		var res arpprobe.Result
		err := clientHost.Do(func() error {
			var err error
			res, err = arpprobe.ProbeInterface(ctx, ifi, addrs, arpprobe.Options{Wait: 300 * time.Millisecond})
			return err
		})
		return res, err
	}
	tr := &cluster.Traffic{URL: r.URL, Interval: 50 * time.Millisecond, Client: &http.Client{Timeout: 3 * time.Second,
		Transport: &http.Transport{DisableKeepAlives: true, DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := clientHost.Do(func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 3 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		}}}}
	tctx, tcancel := context.WithCancel(ctx)
	go tr.Run(tctx)
	st.Runner.Traffic = tr
	before := st.Runner.Snapshot.Lines()
	err = st.Runner.Run(ctx, st.Steps)
	tcancel()
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}
	ok, fail := tr.Totals()
	t.Logf("traffic to %s during the migration: %d ok, %d failed; addresses %v", r.URL, ok, fail, before)
	if fail != 0 || ok < 10 {
		t.Errorf("traffic: %d ok, %d failed", ok, fail)
	}
	after, err := cluster.TakeSnapshot(ctx, cs)
	must(t, err)
	if strings.Join(after.Lines(), " ") != strings.Join(before, " ") {
		t.Errorf("addresses changed: %v -> %v", before, after.Lines())
	}
	if _, err := cs.AppsV1().DaemonSets("metallb-system").Get(ctx, "speaker", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("speaker DaemonSet not removed: %v", err)
	}
}
