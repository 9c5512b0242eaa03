package lab_test

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/lab/labtest"
	"github.com/mooringlb/mooring/internal/netlab"
)

// envBGPSideBySideRuns turns TestLabBGPSideBySide on with this many hard
// kills per speaker (off by default: a comparison for
// docs/benchmarks.md, not a CI check).
const envBGPSideBySideRuns = "MOORING_BGP_SIDE_BY_SIDE_RUNS"

// TestLabBGPSideBySide measures, in one run, the same hard kills of a next
// hop against the same FRR 8.4 router with MetalLB v0.16.2's native BGP
// speaker (3 s hold time: it has no BFD, and 3 s is the protocol's floor;
// its default is 90 s) and with Mooring's speaker (BFD 300 ms × 3, 9 s
// hold time), one lab after the other, and logs the ratio of the medians.
// Every kill starts from the same picture: all three nodes next hops of
// the route (and, for Mooring, BFD Up with each), which `mooring failover`
// does not wait for between its own runs.
func TestLabBGPSideBySide(t *testing.T) {
	v := os.Getenv(envBGPSideBySideRuns)
	if v == "" {
		t.Skipf("set %s=N to compare N kills per speaker", envBGPSideBySideRuns)
	}
	runs, err := strconv.Atoi(v)
	if err != nil || runs < 1 {
		t.Fatalf("%s=%q: want a positive number of runs", envBGPSideBySideRuns, v)
	}
	var metallb, mooring killSeries
	t.Run("MetalLB", func(t *testing.T) {
		hold := 3 * time.Second
		ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, MetalLB: true, LogLevel: slog.LevelWarn,
			BGP: lab.BGPConfig{Enabled: true, HoldTime: hold}})
		vip := netip.PrefixFrom(netip.MustParseAddr(r.Service.Ingress[0]), 32)
		var err error
		metallb, err = killEach(t, r, runs, hold*2/3-500*time.Millisecond, hold+5*time.Second, func() error {
			return nexthopsWithin(ctx, r.Cluster.Router(), vip, labNodes4(r), 2*time.Minute)
		})
		if err != nil {
			// MetalLB's, not Mooring's: a finding for docs/benchmarks.md
			// (its restored node stops re-advertising after a few kills,
			// as metallb #2803), not a failure of this comparison.
			t.Logf("MetalLB's series ends early: %v", err)
		}
	})
	t.Run("Mooring", func(t *testing.T) {
		ctx, r := labtest.Start(t, envSelf, labtest.Options{Nodes: 3, Mooring: true, LogLevel: slog.LevelWarn,
			BGP: lab.BGPConfig{Enabled: true, BFD: true}})
		dyn := labDynamic(t, r)
		vip := netip.PrefixFrom(netip.MustParseAddr(r.Service.Ingress[0]), 32)
		if !vip.Addr().Is4() {
			t.Fatalf("the demo Service's first address %s is not IPv4", vip)
		}
		var err error
		mooring, err = killEach(t, r, runs, 200*time.Millisecond, 3*time.Second, func() error {
			if err := nexthopsWithin(ctx, r.Cluster.Router(), vip, labNodes4(r), 2*time.Minute); err != nil {
				return err
			}
			waitBFD(t, ctx, r, dyn, mooringv1.BFDStateUp, 0, 2*time.Minute)
			return nil
		})
		if err != nil {
			t.Error(err)
		}
	})
	if len(metallb.withdrawn) == 0 || len(mooring.withdrawn) == 0 {
		t.Fatalf("nothing to compare: MetalLB %d kills, Mooring %d", len(metallb.withdrawn), len(mooring.withdrawn))
	}
	for _, c := range []struct {
		what string
		a, b []float64
	}{
		{"route withdrawn", metallb.withdrawn, mooring.withdrawn},
		{"phase 1 (outage)", metallb.phase1, mooring.phase1},
		{"failed requests", metallb.failed, mooring.failed},
	} {
		a, b := median(c.a), median(c.b)
		t.Logf("%s, median: MetalLB %.3f (worst %.3f, n=%d), Mooring %.3f (worst %.3f, n=%d): ratio %.2f; MetalLB %v, Mooring %v",
			c.what, a, slices.Max(c.a), len(c.a), b, slices.Max(c.b), len(c.b), a/b, c.a, c.b)
	}
}

// killSeries is what each kill of a series measured.
type killSeries struct{ withdrawn, phase1, failed []float64 }

// killEach runs `mooring failover` once per kill, runs times, each after
// ready() says the lab is whole again. When it is not, the series ends
// there with the kills measured so far and an error saying why.
func killEach(t *testing.T, r *lab.Ready, runs int, lo, hi time.Duration, ready func() error) (killSeries, error) {
	t.Helper()
	var s killSeries
	for i := range runs {
		if err := ready(); err != nil {
			return s, fmt.Errorf("before kill %d: %w: the series ends with %d kills", i+1, err, i)
		}
		rep := checkFailoverCLI(t, r, 1, lo, hi)
		run := rep.Runs[0]
		if run.Events.RouteWithdrawn == nil {
			t.Fatalf("no route withdrawal: %+v", run)
		}
		s.withdrawn = append(s.withdrawn, *run.Events.RouteWithdrawn)
		s.phase1 = append(s.phase1, run.Phase1S)
		s.failed = append(s.failed, float64(run.Failed))
	}
	return s, nil
}

// median of a non-empty sample.
func median(v []float64) float64 {
	s := slices.Clone(v)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// labNodes4 are the lab's three nodes' IPv4 addresses, sorted.
func labNodes4(r *lab.Ready) []netip.Addr {
	var out []netip.Addr
	for i := 1; i <= 3; i++ {
		out = append(out, r.Cluster.Host(netlab.NodeName(i)).Addr4)
	}
	return out
}
