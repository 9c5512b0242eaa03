package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/kube"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// neighbourBound is far below the time a client's neighbour entry for a
// dead MAC takes to fail by itself (REACHABLE for 15–45 s after the last
// confirmation, then DELAY 5 s and 3 probes): an address back within it was
// taken over and announced by gratuitous ARP, not rediscovered by luck.
const neighbourBound = 10 * time.Second

// labNodeMACs maps every lab node's eth0 MAC to its name: what the client
// sees for an address, and what `lab status` prints as --node-mac flags.
func labNodeMACs(r *lab.Ready) failover.NodeMACs {
	var m failover.NodeMACs
	for i := 1; i <= 64; i++ {
		h := r.Cluster.Host(netlab.NodeName(i))
		if h == nil {
			break
		}
		m = append(m, failover.NodeMAC{Node: h.Name, MAC: h.MAC})
	}
	return m
}

// checkFailover measures one hard failover of the announcing node with the
// code of `mooring failover` and the lab's real seams: requests and the
// neighbour table from the client namespace, the lab's hard kill, the
// EndpointSlices through client-go. It asserts what issue 5 must show: the
// address answered again well before the client's neighbour entry could
// have expired by itself (phase 1), and phase 2 (the dead node's endpoints
// leaving) was measured to its end, and that Measure restored the node
// after its (last) run.
//
// fs are processes users started in nodes (see startForeign): the kill must
// take the victim's, the restore run it again; the restarted one's pid goes
// into restarted.
func checkFailover(t *testing.T, r *lab.Ready, fs []*foreign, restarted *int) {
	if len(r.Service.Ingress) == 0 {
		t.Fatal("the Service has no LoadBalancer address")
	}
	rc, err := kube.RESTConfig(r.Kubeconfig, 20, 40)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	client := r.Cluster.Host("client")
	nl, err := client.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()

	target := failover.Target{Addr: netip.AddrPortFrom(netip.MustParseAddr(r.Service.Ingress[0]), lab.DemoPort)}
	cfg := failover.DefaultConfig(target)
	cfg.MaxRun = 90 * time.Second // 20 s grace period (without fast eviction) + the conntrack tail + quiet, with room
	env := failover.Env{
		Dial:     failover.NamespaceDialer(client.NS()),
		Killer:   failover.KillerFunc(func(_ context.Context, node string) error { return r.Cluster.Kill(node) }),
		Restorer: failover.RestorerFunc(func(_ context.Context, node string) error { return r.Cluster.Restore(node) }),
		Owner:    failover.NeighbourTable{Handle: nl},
		NodeMACs: labNodeMACs(r),
		Cluster:  failover.KubeCluster{Client: cs, Namespace: lab.DemoNamespace, Name: lab.DemoService},
		Log:      slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn})),
		Progress: func(e failover.ProgressEvent) { t.Logf("failover %+.2fs: %s", e.SinceKill.Seconds(), e.Text) },
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	runs, err := failover.Measure(ctx, cfg, env)
	if err != nil || len(runs) != 1 {
		t.Fatalf("failover.Measure: %d runs, %v", len(runs), err)
	}
	run := runs[0]
	tl := run.Timeline
	logTimeline(t, run)
	defer func() {
		checkRestoredAfterFailover(t, r, env, run.Node)
		*restarted = checkRestartedWithNode(t, fs, run.Node)
	}()
	checkKilledWithNode(t, fs, run.Node)

	checkPhases(t, run)
	checkClasses(t, run)
	checkReport(t, cfg, run)
	checkSVG(t, run)
	if len(run.Warnings) > 0 {
		t.Logf("warnings: %v", run.Warnings)
	}
	if c := tl.Counts[failover.PhaseBefore]; c.Failed > 0 {
		t.Errorf("%d of %d requests failed before the kill (%v): the lab was not healthy", c.Failed, c.Requests, c.ByClass)
	}
}

func logTimeline(t *testing.T, run failover.RunResult) {
	tl := run.Timeline
	at := func(x time.Time) string {
		if x.IsZero() {
			return "-"
		}
		return "+" + x.Sub(tl.Kill).Round(time.Millisecond).String()
	}
	t.Logf("killed %s, new owner %q: first error %s, owner change %s, recovered %s, endpoints gone %s, last error %s; phase 1 %v, phase 2 %v; errors phase 1 %v, phase 2 %v, after %v",
		run.Node, run.NewNode, at(tl.FirstError), at(tl.OwnerChange), at(tl.Recovered), at(tl.EndpointsGone), at(tl.LastError),
		tl.Phase1.Round(time.Millisecond), tl.Phase2.Round(time.Millisecond),
		tl.Counts[failover.Phase1].ByClass, tl.Counts[failover.Phase2].ByClass, tl.Counts[failover.PhaseAfter].ByClass)
}

// checkPhases asserts the timeline: the address went silent and came back
// on another node's MAC within neighbourBound, and phase 2 ran until the
// dead node's endpoints had left.
func checkPhases(t *testing.T, run failover.RunResult) {
	tl := run.Timeline
	if tl.FirstError.IsZero() {
		t.Errorf("no request failed after killing %s: nothing was measured", run.Node)
	}
	if !tl.Phase1Complete || tl.Phase1 <= 0 || tl.Phase1 >= neighbourBound {
		t.Errorf("phase 1 = %v (complete %v), want the address back within %v of the kill", tl.Phase1, tl.Phase1Complete, neighbourBound)
	}
	if tl.OwnerChange.IsZero() || tl.OwnerChange.Sub(tl.Kill) >= neighbourBound {
		t.Errorf("the client's neighbour entry changed at %v after the kill, want a gratuitous ARP within %v", tl.OwnerChange.Sub(tl.Kill), neighbourBound)
	}
	if run.NewNode == "" || run.NewNode == run.Node {
		t.Errorf("new owner %q (MAC %s), want the other L2 node than %s", run.NewNode, run.OwnerAfter, run.Node)
	}
	if tl.EndpointsGone.IsZero() || !tl.Phase2Complete {
		t.Fatalf("the endpoints of %s never left the EndpointSlices (phase 2 complete %v)", run.Node, tl.Phase2Complete)
	}
	// The lab's agents run with --fast-endpoint-eviction: the endpoints
	// leave when the agents confirm the death, not after the 20 s grace
	// period (sometimes even before the address answers again: phase 2 is
	// then 0).
	if gone := tl.EndpointsGone.Sub(tl.Kill); gone <= 0 || gone >= neighbourBound {
		t.Errorf("endpoints gone %v after the kill, want within %v (fast endpoint eviction)", gone, neighbourBound)
	}
	if end := tl.Recovered.Add(tl.Phase2); end.Before(tl.EndpointsGone) {
		t.Errorf("phase 2 ends at %v, before the endpoints left at %v", end.Sub(tl.Kill), tl.EndpointsGone.Sub(tl.Kill))
	}
}

// knownClass says whether key is one of the documented error classes
// (docs/failover.md); "other" is not: it means the classifier missed a case.
func knownClass(key string) bool {
	switch failover.Class(key) {
	case failover.ClassConnectTimeout, failover.ClassUnreachable, failover.ClassRefused, failover.ClassReset,
		failover.ClassTLS, failover.ClassResponseTimeout, failover.ClassClosed:
		return true
	}
	code, ok := strings.CutPrefix(key, "http-")
	n, err := strconv.Atoi(code)
	return ok && err == nil && n >= 400 && n < 600
}

func checkClasses(t *testing.T, run failover.RunResult) {
	for _, p := range failover.Phases {
		for key := range run.Timeline.Counts[p].ByClass {
			if knownClass(key) {
				continue
			}
			var details []string
			for _, res := range run.Results {
				if res.Outcome.Key() == key && len(details) < 5 {
					details = append(details, res.Outcome.Detail)
				}
			}
			t.Errorf("%s: error class %q is not a real class; e.g. %q", p, key, details)
		}
	}
}

// checkReport builds the JSON report `mooring failover -o json` prints and
// reads it back.
func checkReport(t *testing.T, cfg failover.Config, run failover.RunResult) {
	rep := failover.Report{
		Service: lab.DemoNamespace + "/" + lab.DemoService, Target: cfg.Target.String(), Rate: cfg.Rate,
		TimeoutS: cfg.Timeout.Seconds(), Mode: "hard", StartedAt: run.Timeline.Start,
		Runs:    []failover.RunReport{failover.NewRunReport(run)},
		Summary: failover.NewSummaryJSON(failover.SummarizeRuns([]failover.Timeline{run.Timeline})),
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatalf("marshalling the report: %v", err)
	}
	var back failover.Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("reading the report back: %v\n%s", err, b)
	}
	rr := back.Runs[0]
	switch {
	case !rr.Phase1Complete || !rr.Phase2Complete || rr.Phase1S <= 0 || rr.Phase2S < 0:
		t.Errorf("report: phase 1 %vs (complete %v), phase 2 %vs (complete %v), want both measured", rr.Phase1S, rr.Phase1Complete, rr.Phase2S, rr.Phase2Complete)
	case rr.Events.EndpointsGone == nil || rr.Events.OwnerChange == nil || rr.Events.Recovered == nil:
		t.Errorf("report: events %+v, want owner change, recovered and endpoints gone", rr.Events)
	case back.Summary.Runs != 1 || back.Summary.Incomplete != 0:
		t.Errorf("report summary: %+v", back.Summary)
	}
	if rr.Failed == 0 || len(rr.Phases[failover.Phase1].Errors) == 0 {
		t.Errorf("report: %d failed, phase 1 errors %v, want the kill's errors", rr.Failed, rr.Phases[failover.Phase1].Errors)
	}
}

// checkSVG renders the run's picture and checks it is well-formed SVG with
// both phases drawn.
func checkSVG(t *testing.T, run failover.RunResult) {
	var buf bytes.Buffer
	if err := failover.RenderSVG(&buf, run, "default/echo — killed "+run.Node); err != nil {
		t.Fatalf("RenderSVG: %v", err)
	}
	dec := xml.NewDecoder(bytes.NewReader(buf.Bytes()))
	root := ""
	for range 100000 {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the SVG is not well-formed XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && root == "" {
			root = se.Name.Local
		}
	}
	if root != "svg" || !bytes.Contains(buf.Bytes(), []byte("phase 2")) || !bytes.Contains(buf.Bytes(), []byte("endpoints gone")) {
		t.Errorf("SVG (%d bytes, root %q) lacks the phases or markers", buf.Len(), root)
	}
}

// checkRestoredAfterFailover: Measure restored the killed node after its
// last run, as `mooring failover` does (issue 8 item 15), and returned
// once the backends were spread again and the address answered; the
// restored node's kube-proxy must serve a ClusterIP.
func checkRestoredAfterFailover(t *testing.T, r *lab.Ready, env failover.Env, node string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	eps, err := env.Cluster.Endpoints(ctx)
	if err == nil {
		err = failover.CheckSpread(eps)
	}
	if err != nil {
		t.Fatalf("after the run the backends are not spread again: %v", err)
	}
	if err := r.Cluster.Restore(node); err == nil || !strings.Contains(err.Error(), "is not killed") {
		t.Errorf("%s is still killed after the run (Restore: %v)", node, err)
	}
	cip := "http://" + netip.AddrPortFrom(netip.MustParseAddr(r.Service.ClusterIP[0]), lab.DemoPort).String() + "/"
	if body := get(t, r, node, cip); !strings.Contains(body, "pod=default/echo-") {
		t.Errorf("%s from the restored %s answered %q", cip, node, body)
	}
}
