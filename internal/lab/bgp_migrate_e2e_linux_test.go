package lab_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/cli/migrate"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/migrate/cluster"
	"github.com/mooringlb/mooring/internal/netlab"
)

// TestLabBGPMigrateMetalLB hands the BGP lab over from the real MetalLB
// v0.16.2 in native BGP mode (its speakers peer with the FRR router, the
// demo Service's IPv4 address is one ECMP route over the three nodes) to
// Mooring's agents: `mooring migrate metallb plan` lists the node-by-node
// steps, then `run`'s steps (the Go API the verb runs) walk them while the client behind the router sends 20
// requests a second to the address. The hand-over goes node by node (a
// router keeps one session per neighbour address, so a node's MetalLB and
// Mooring sessions cannot overlap): the route never leaves the router and
// keeps at least two next hops in every sample, no request fails, the
// address does not change, and at the end the route is over all three
// nodes from Mooring's sessions, MetalLB is gone, and the last step
// (re-applying the BGPPeers without the hand-over's node-selector term)
// reset none of Mooring's sessions.
func TestLabBGPMigrateMetalLB(t *testing.T) {
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, Mooring: true, MetalLB: true, LogLevel: slog.LevelWarn,
		BGP: lab.BGPConfig{Enabled: true}})
	if len(r.Service.Ingress) == 0 {
		t.Fatalf("the demo Service has no MetalLB address: %+v", r.Service)
	}
	b := &bgpLab{t: t, ctx: ctx, r: r, router: r.Cluster.Router(), addr4: map[string]netip.Addr{}, addr6: map[string]netip.Addr{},
		vip4: netip.PrefixFrom(netip.MustParseAddr(r.Service.Ingress[0]), 32)}
	for i := 1; i <= 3; i++ {
		name := netlab.NodeName(i)
		b.nodes = append(b.nodes, name)
		b.addr4[name], b.addr6[name] = r.Cluster.Host(name).Addr4, r.Cluster.Host(name).Addr6
	}
	all := b.nexthops(b.nodes, false)
	waitNexthops(t, ctx, b.router, b.vip4, all, 60*time.Second)
	cs := labClientset(t, r)
	dc := labDynamic(t, r)

	dir := t.TempDir()
	// What the operator reads first: `mooring migrate metallb plan`.
	plan, err := labCLI(t, filepath.Dir(r.Kubeconfig), "migrate", "metallb", "plan", "--kubeconfig", r.Kubeconfig,
		"--import-file", filepath.Join(dir, "plan.yaml"), "--save-dir", filepath.Join(dir, "plan-saved"))
	if err != nil || !strings.Contains(string(plan), "hand node node-3's BGP sessions over to Mooring") ||
		!strings.Contains(string(plan), "pin MetalLB's speakers to the nodes they run on") {
		t.Fatalf("migrate metallb plan: %v\n%s", err, plan)
	}
	o := migrate.Options{Namespace: lab.MetalLBNamespace, ImportFile: filepath.Join(dir, "mooring.yaml"), SaveDir: filepath.Join(dir, "saved"),
		CheckTimeout: 90 * time.Second}
	st, err := migrate.Prepare(ctx, o, cs, dc, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	before := st.Runner.Snapshot.Lines()
	var out strings.Builder
	var sessions map[netip.Addr]frr.Session // after the last node's hand-over
	st.Runner.Out = stampWriter{&out}
	st.Runner.AfterStep = func(_ context.Context, i int) {
		if i+1 < len(st.Steps) && st.Steps[i+1].Name == "remove MetalLB" {
			sessions, _ = b.router.Sessions(ctx)
		}
	}
	watch := b.watchRoutes()
	stopLoad := b.load()
	time.Sleep(2 * time.Second)
	start := time.Now()
	err = st.Runner.Run(ctx, st.Steps)
	took := time.Since(start)
	time.Sleep(2 * time.Second)
	load, samples := stopLoad(), watch.stop()
	t.Log(out.String())
	if err != nil {
		t.Fatal(err)
	}

	fewest := len(all)
	for _, s := range samples {
		fewest = min(fewest, len(s.hops))
		if s.err != nil || len(s.hops) < 2 {
			t.Errorf("route sample with fewer than two next hops: %s", s)
		}
	}
	t.Logf("migration took %s; client: %s; %d route samples, fewest next hops %d; addresses %v; each node's next hop away (MetalLB's session closed → Mooring's advertised): %s",
		took.Round(time.Millisecond), load, len(samples), fewest, before, b.gaps(samples))
	if failed := load.failed(); len(failed) > 0 || float64(len(load)) < 20*0.8*took.Seconds() {
		t.Errorf("requests through the router during the migration: %s:\n%s", load, lines(failed))
	}
	if broken := load.broken(); len(broken) > 0 {
		t.Logf("kept connections broken although no request failed (a next hop left or came):\n%s", lines(broken))
	}
	if after, err := cluster.TakeSnapshot(ctx, cs); err != nil || strings.Join(after.Lines(), " ") != strings.Join(before, " ") {
		t.Errorf("addresses changed: %v -> %v (%v)", before, after.Lines(), err)
	}
	checkMigratedBGP(t, b, cs, dc, sessions)
}

// gaps says, per node, how long its next hop was away from the route in
// samples (first sample without it to the next with it; 200 ms samples).
func (b *bgpLab) gaps(samples []routeSample) string {
	var parts []string
	for _, n := range b.nodes {
		var from time.Time
		var total time.Duration
		for _, s := range samples {
			in := slices.Contains(s.hops, b.addr4[n])
			switch {
			case !in && from.IsZero():
				from = s.at
			case in && !from.IsZero():
				total += s.at.Sub(from)
				from = time.Time{}
			}
		}
		parts = append(parts, fmt.Sprintf("%s %.1f s", n, total.Seconds()))
	}
	return strings.Join(parts, ", ")
}

// checkMigratedBGP checks the end of the BGP hand-over: the route over
// every node from Mooring's sessions, no MetalLB workload left, and the
// router's sessions as they were after the last node's hand-over.
func checkMigratedBGP(t *testing.T, b *bgpLab, cs kubernetes.Interface, dc dynamic.Interface, sessions map[netip.Addr]frr.Session) {
	t.Helper()
	waitNexthops(t, b.ctx, b.router, b.vip4, b.nexthops(b.nodes, false), 30*time.Second)
	for _, n := range b.nodes {
		if s := speakerSession(b.ctx, dc, n); s.State != "Established" {
			t.Errorf("%s's BGPSpeaker: session %q (%s %s)", n, s.State, s.Reason, s.Message)
		}
	}
	if _, err := cs.AppsV1().DaemonSets(lab.MetalLBNamespace).Get(b.ctx, lab.MetalLBSpeaker, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("MetalLB's speaker DaemonSet not removed: %v", err)
	}
	if pods, err := cs.CoreV1().Pods(lab.MetalLBNamespace).List(b.ctx, metav1.ListOptions{}); err != nil || len(pods.Items) != 0 {
		t.Errorf("MetalLB pods left: %v %d", err, len(pods.Items))
	}
	now, err := b.router.Sessions(b.ctx)
	if err != nil {
		t.Fatal(err)
	}
	var reset []string
	for _, n := range b.nodes {
		a := b.addr4[n]
		was, is := sessions[a], now[a]
		if was.State != "Established" || is.State != "Established" || is.Uptime < was.Uptime ||
			is.Messages.NotificationsRecv != was.Messages.NotificationsRecv {
			reset = append(reset, fmt.Sprintf("%s: %s up %s → %s up %s", n, was.State, was.Uptime, is.State, is.Uptime))
		}
	}
	if len(reset) > 0 {
		t.Errorf("Mooring's sessions reset by removing MetalLB and re-applying the BGPPeers: %s", strings.Join(reset, "; "))
	}
}

// stampWriter prefixes what the runner prints with the time, to line the
// steps up with the route samples and the load's failures.
type stampWriter struct{ w io.Writer }

func (s stampWriter) Write(b []byte) (int, error) {
	if _, err := fmt.Fprintf(s.w, "%s %s", time.Now().Format("15:04:05.000"), b); err != nil {
		return 0, err
	}
	return len(b), nil
}
