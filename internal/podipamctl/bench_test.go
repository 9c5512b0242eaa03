package podipamctl_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
	"github.com/mooringlb/mooring/internal/testenv"
)

// TestBlocksAtScale measures, for cluster-pool and multi-pool, the time
// from controller start to every one of N Nodes holding an IPv4 and an
// IPv6 block, and the controller's API writes per node
// (apiserver_request_total). Each Node is registered first, as its agent
// does (the PodIPAMNode create), so what is counted is the controller's
// writes only; the log line says so.
// Skipped unless MOORING_PODIPAM_BENCH=<nodes> (1000 for docs/benchmarks.md):
//
//	MOORING_PODIPAM_BENCH=1000 go test -count=1 -run TestBlocksAtScale -v ./internal/podipamctl
func TestBlocksAtScale(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("MOORING_PODIPAM_BENCH"))
	if nodes <= 0 {
		t.Skip("set MOORING_PODIPAM_BENCH=<nodes> to measure")
	}
	for _, mode := range []podipamctl.Mode{podipamctl.ModeClusterPool, podipamctl.ModeMultiPool} {
		t.Run(string(mode), func(t *testing.T) {
			e := startEnv(t)
			ctx := context.Background()
			c := e.Client
			if err := podipamctl.LockMode(ctx, c, ns, mode, "bench"); err != nil {
				t.Fatal(err)
			}
			cfg := podipamctl.Config{Mode: mode, PreAllocate: 8, StatusInterval: podipamctl.DefaultStatusInterval}
			if mode == podipamctl.ModeClusterPool {
				cfg.ClusterPoolV4, cfg.MaskV4 = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}, 24
				cfg.ClusterPoolV6, cfg.MaskV6 = []netip.Prefix{netip.MustParsePrefix("fd00::/48")}, 120
			} else {
				mkPool(t, c, "default", []string{"10.0.0.0/8"}, 24, []string{"fd00::/48"}, 120)
			}
			var wg sync.WaitGroup
			work := make(chan int)
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range work {
						// The Node, then its agent's registration (see mkNode).
						n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%04d", i)}}
						if err := c.Create(ctx, n); err != nil {
							t.Error(err)
							continue
						}
						rec := &mooringv1.PodIPAMNode{ObjectMeta: metav1.ObjectMeta{Name: n.Name}}
						if mode == podipamctl.ModeMultiPool { // what RunNode asks for first
							rec.Spec.Requests = []mooringv1.PodIPAMRequest{{Pool: "default", IPv4Addresses: 8, IPv6Addresses: 8}}
						}
						if err := c.Create(ctx, rec); err != nil {
							t.Error(err)
						}
					}
				}()
			}
			for i := range nodes {
				work <- i
			}
			close(work)
			wg.Wait()
			before := writes(t, e)
			start := time.Now()
			startPodIPAM(t, e, cfg)
			var took time.Duration
			eventually(t, 10*time.Minute, "every node's blocks", func() error {
				var list mooringv1.PodIPAMNodeList
				if err := c.List(ctx, &list); err != nil {
					return err
				}
				done := 0
				for _, r := range list.Items {
					if len(r.Status.Blocks) == 2 {
						done++
					}
				}
				if done < nodes {
					return fmt.Errorf("%d of %d nodes have both blocks", done, nodes)
				}
				took = time.Since(start)
				return nil
			})
			time.Sleep(2 * time.Second) // let trailing writes (pool status) land
			after := writes(t, e)
			var keys []string
			total := 0.0
			for k, d := range testenv.DiffRequests(before, after) {
				keys = append(keys, fmt.Sprintf("%s=%.0f (%.2f/node)", k, d, d/float64(nodes)))
				total += d
			}
			sort.Strings(keys)
			noOverlap(t, c)
			t.Logf("%s: %d nodes × 2 families: all blocks %s after controller start; controller writes %.0f (%.2f per node): %s; "+
				"not counted: each node's one registration by its agent (create podipamnodes, 1 per node, before the controller started)",
				mode, nodes, took.Round(10*time.Millisecond), total, total/float64(nodes), strings.Join(keys, ", "))
		})
	}
}

// writes reads the apiserver's mutating-request counter (testenv's shared
// reader).
func writes(t testing.TB, e *testenv.Env) map[string]float64 {
	t.Helper()
	w, err := testenv.MutatingRequests(context.Background(), e.Clientset)
	if err != nil {
		t.Fatal(err)
	}
	return w
}
