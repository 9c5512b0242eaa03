package lab_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

// TestLabBGPMetalLB runs the BGP lab with the real MetalLB v0.16.2 in its
// native BGP mode (3 s hold time): the router holds the demo Service's
// address as one ECMP route over all three nodes in zebra and in its
// kernel table, `lab exec router -- vtysh` shows it, the client reaches
// the address only through the router, and `mooring failover`, unchanged,
// measures a hard kill of a next hop from the client, whose next hop
// leaves the route after the hold time (MetalLB's native speaker has no
// BFD) and comes back with the
// node.
func TestLabBGPMetalLB(t *testing.T) {
	hold := 3 * time.Second
	ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, MetalLB: true, LogLevel: slog.LevelWarn,
		BGP: lab.BGPConfig{Enabled: true, HoldTime: hold}})
	if len(r.Service.Ingress) == 0 {
		t.Fatalf("the demo Service has no MetalLB address: %+v", r.Service)
	}
	vip := netip.PrefixFrom(netip.MustParseAddr(r.Service.Ingress[0]), 32)
	router := r.Cluster.Router()
	var nodes []netip.Addr
	for i := 1; i <= 3; i++ {
		nodes = append(nodes, r.Cluster.Host(netlab.NodeName(i)).Addr4)
	}
	waitNexthops(t, ctx, router, vip, nodes, 30*time.Second)
	checkKernelECMP(t, r.Cluster.Host(lab.RouterHost), vip, nodes)
	checkRoutedClient(t, r.Cluster.Host(netlab.ClientName), vip.Addr())

	// What an operator types (lab exec injects the router's vty socket).
	out, err := labCLI(t, filepath.Dir(r.Kubeconfig), "lab", "exec", lab.RouterHost, "--", "vtysh", "-c", "show ip route json")
	if err != nil {
		t.Fatalf("lab exec router -- vtysh: %v\n%s", err, out)
	}
	rib, err := frr.ParseRIB(out)
	if err != nil {
		t.Fatal(err)
	}
	if got := rib.Installed(vip, "bgp"); !slices.Equal(got, nodes) {
		t.Fatalf("lab exec router -- vtysh: %s via %v, want %v", vip, got, nodes)
	}

	// The router's hold timer runs from the last keepalive it got, up to a
	// keepalive interval (hold/3) before the kill; the upper bound leaves a
	// loaded machine room (the timer fired 1.5 s late at load 50). The
	// figures are measured elsewhere.
	checkFailoverCLI(t, r, 1, hold*2/3-500*time.Millisecond, hold+5*time.Second)
	waitNexthops(t, ctx, router, vip, nodes, 2*time.Minute) // restored by the failover run
}

// checkFailoverCLI runs `mooring failover` as an operator would against
// the BGP lab (runs runs, hard kills): it finds the router by itself,
// kills a next hop holding a backend, and reports the route withdrawal,
// which must fall in [lo, hi] in every run, and phase 1 as the route
// withdrawal, in JSON and in the picture.
func checkFailoverCLI(t *testing.T, r *lab.Ready, runs int, lo, hi time.Duration) failover.Report {
	t.Helper()
	stateDir := filepath.Dir(r.Kubeconfig)
	netns, err := labCLI(t, stateDir, "lab", "netns", netlab.ClientName)
	if err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable()
	svgDir := t.TempDir()
	out, logs, err := labCLILogs(t, stateDir, "--log-level", "debug", "failover", "echo", "--kubeconfig", r.Kubeconfig,
		"--client-netns", string(bytes.TrimSpace(netns)), "--rate", "20", "--max-run", "60s", "--settle", "1s",
		"--runs", fmt.Sprint(runs),
		"--kill-command", self+" lab kill {node}", "--restore-command", self+" lab restore {node}",
		"-o", "json", "--svg-dir", svgDir)
	if err != nil {
		t.Fatalf("mooring failover: %v\n%s", err, out)
	}
	// How long `lab kill` took (kill → the node's link down and its
	// processes killed): part of every figure measured from the kill.
	for _, l := range bytes.Split(logs, []byte("\n")) {
		if bytes.Contains(l, []byte(`msg="kill done"`)) {
			t.Logf("failover: %s", l)
		}
	}
	var rep failover.Report
	if err := json.Unmarshal(out, &rep); err != nil || len(rep.Runs) != runs {
		t.Fatalf("failover JSON (%d runs wanted): %v\n%s", runs, err, out)
	}
	for i, run := range rep.Runs {
		t.Logf("run %d: killed %s (next hops %v): route withdrawn %v s, phase 1 %.3f s, phase 2 %.3f s, %d/%d failed",
			i+1, run.KilledNode, run.NexthopsBefore, deref(run.Events.RouteWithdrawn), run.Phase1S, run.Phase2S, run.Failed, run.Requests)
		// Later runs may start before the node restored by the run before
		// is a next hop again (the failover waits for the Service, not for
		// the route): only the first must see all three.
		if run.KilledNode == "" || (i == 0 && len(run.NexthopsBefore) != 3) {
			t.Errorf("run %d killed %q with next hops %v, want a node of 3 next hops", i+1, run.KilledNode, run.NexthopsBefore)
		}
		w := run.Events.RouteWithdrawn
		if w == nil || *w < lo.Seconds() || *w > hi.Seconds() || !run.Phase1Complete || run.Phase1S > *w+1 {
			t.Errorf("run %d: route withdrawn %v s, phase 1 %.3f s (complete %v): want the withdrawal at %.1f-%.1f s and phase 1 ending with it",
				i+1, deref(w), run.Phase1S, run.Phase1Complete, lo.Seconds(), hi.Seconds())
		}
		svg, err := os.ReadFile(run.SVG)
		if err != nil || !bytes.Contains(svg, []byte("phase 1 (route withdrawal)")) || !bytes.Contains(svg, []byte(`data-marker="route withdrawn"`)) {
			t.Errorf("the picture %s does not label phase 1 as the route withdrawal (%v)", run.SVG, err)
		}
	}
	if s := rep.Summary.RouteWithdrawnS; s == nil {
		t.Error("the summary has no route withdrawal")
	} else {
		t.Logf("route withdrawn: median %.3f s, worst %.3f s, n=%d; phase 1 median %.3f s; failed requests median %v",
			s.Median, s.Worst, s.N, rep.Summary.Phase1S.Median, rep.Summary.Failed.Median)
	}
	return rep
}

func deref(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// waitNexthops waits until the router's zebra has p as a BGP route over
// exactly want (sorted).
func waitNexthops(t *testing.T, ctx context.Context, router *frr.Client, p netip.Prefix, want []netip.Addr, d time.Duration) {
	t.Helper()
	if err := nexthopsWithin(ctx, router, p, want, d); err != nil {
		t.Fatal(err)
	}
}

// nexthopsWithin is waitNexthops returning the failure.
func nexthopsWithin(ctx context.Context, router *frr.Client, p netip.Prefix, want []netip.Addr, d time.Duration) error {
	var got []netip.Addr
	for deadline := time.Now().Add(d); ; time.Sleep(50 * time.Millisecond) {
		fam := frr.IPv4
		if p.Addr().Is6() {
			fam = frr.IPv6
		}
		rib, err := router.RIB(ctx, fam)
		if err != nil {
			return err
		}
		if got = rib.Installed(p, "bgp"); slices.Equal(got, want) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("router: %s via %v after %s, want %v", p, got, d, want)
		}
	}
}

// checkKernelECMP checks the router's kernel has p over every next hop.
func checkKernelECMP(t *testing.T, router *netlab.Host, p netip.Prefix, want []netip.Addr) {
	t.Helper()
	nl, err := router.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	routes, err := nl.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), 32)}}, netlink.RT_FILTER_DST)
	if err != nil || len(routes) != 1 {
		t.Fatalf("router's kernel routes to %s: %v, %v", p, routes, err)
	}
	var got []netip.Addr
	for _, nh := range routes[0].MultiPath {
		a, _ := netip.AddrFromSlice(nh.Gw)
		got = append(got, a.Unmap())
	}
	slices.SortFunc(got, netip.Addr.Compare)
	if !slices.Equal(got, want) {
		t.Fatalf("router's kernel: %s via %v, want %v", p, got, want)
	}
}

// checkRoutedClient checks the client reaches addr through the router's
// link, not the nodes' segment.
func checkRoutedClient(t *testing.T, client *netlab.Host, addr netip.Addr) {
	t.Helper()
	nl, err := client.NetlinkHandle()
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	routes, err := nl.RouteGet(addr.AsSlice())
	if err != nil || len(routes) != 1 {
		t.Fatalf("client's route to %s: %v, %v", addr, routes, err)
	}
	gw := netip.MustParseAddr("10.214.0.1")
	if a, _ := netip.AddrFromSlice(routes[0].Gw); a.Unmap() != gw {
		t.Fatalf("the client reaches %s via %v, want the router %s", addr, routes[0].Gw, gw)
	}
	if client.Addr4.Compare(netip.MustParseAddr("10.214.0.250")) != 0 {
		t.Fatalf("client address %s, want 10.214.0.250 behind the router", client.Addr4)
	}
}

// labCLI runs this test binary as `mooring args...` against the lab in
// stateDir (for at most 5 minutes), returning its standard output, or its
// standard error with the error.
func labCLI(t *testing.T, stateDir string, args ...string) ([]byte, error) {
	t.Helper()
	out, _, err := labCLILogs(t, stateDir, args...)
	return out, err
}

// labCLILogs is labCLI that also returns the standard error.
func labCLILogs(t *testing.T, stateDir string, args ...string) ([]byte, []byte, error) {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, self, args...)
	cmd.Env = append(os.Environ(), envSelf+"=1", lab.EnvStateDir+"="+stateDir)
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		return stderr.Bytes(), stderr.Bytes(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return out.Bytes(), stderr.Bytes(), nil
}
