package podipamctl_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

func setRequests(t testing.TB, c client.Client, node string, release []string, reqs ...mooringv1.PodIPAMRequest) {
	t.Helper()
	eventually(t, 10*time.Second, "write requests of "+node, func() error {
		r := record(t, c, node)
		if r.Name == "" {
			return fmt.Errorf("no record yet")
		}
		r.Spec.Requests, r.Spec.Release = reqs, release
		return c.Update(context.Background(), r)
	})
}

func pool(t testing.TB, c client.Client, name string) *mooringv1.PodIPPool {
	t.Helper()
	var p mooringv1.PodIPPool
	if err := c.Get(context.Background(), client.ObjectKey{Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	return &p
}

// TestMultiPool: every node pre-allocates a default block per family;
// a pool is cut only for the node that asks for it; 70 addresses take a
// second /26; a released block is freed; an overlapping newer pool is
// Conflicting and cuts nothing; an exhausted pool says so on the node and
// the pool; pool status counts blocks.
func TestMultiPool(t *testing.T) {
	e := startEnv(t)
	c := e.Client
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 26, []string{"fd00:244::/112"}, 120)
	mkPool(t, c, "tenant-a", []string{"10.250.0.0/24"}, 26, nil, 0)
	mkNode(t, c, "node-1")
	mkNode(t, c, "node-2")
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})

	for _, n := range []string{"node-1", "node-2"} {
		eventually(t, 30*time.Second, n+" default blocks", func() error {
			if v4, v6 := families(blocks(t, c, n, "default")); v4 != 1 || v6 != 1 {
				return fmt.Errorf("%d/%d", v4, v6)
			}
			return nil
		})
		if b := blocks(t, c, n, "tenant-a"); len(b) != 0 {
			t.Fatalf("%s holds tenant-a blocks %v without asking", n, b)
		}
	}
	// 70 pods of tenant-a (+8 pre-allocated) on node-1: two /26 blocks.
	setRequests(t, c, "node-1", nil, mooringv1.PodIPAMRequest{Pool: "tenant-a", IPv4Addresses: 78})
	eventually(t, 30*time.Second, "second tenant-a block", func() error {
		if b := blocks(t, c, "node-1", "tenant-a"); len(b) != 2 {
			return fmt.Errorf("tenant-a blocks %v", b)
		}
		return nil
	})
	if b := blocks(t, c, "node-2", "tenant-a"); len(b) != 0 {
		t.Fatalf("node-2 got tenant-a blocks %v", b)
	}
	if b := blocks(t, c, "node-1", "default"); len(b) != 2 {
		t.Fatalf("an explicit request list without default dropped node-1's default blocks: %v", b)
	}
	eventually(t, 10*time.Second, "tenant-a status", func() error {
		s := pool(t, c, "tenant-a").Status
		if s.IPv4 == nil || s.IPv4.Blocks != 2 || s.IPv4.Capacity != 4 || s.IPv4.Addresses != 124 || s.Nodes != 1 {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
	noOverlap(t, c)

	// node-2 asks for more than is left: the node and the pool say so.
	setRequests(t, c, "node-2", nil, mooringv1.PodIPAMRequest{Pool: "tenant-a", IPv4Addresses: 200})
	eventually(t, 30*time.Second, "exhausted", func() error {
		cond := meta.FindStatusCondition(record(t, c, "node-2").Status.Conditions, mooringv1.ConditionExhausted)
		pc := meta.FindStatusCondition(pool(t, c, "tenant-a").Status.Conditions, mooringv1.ConditionExhausted)
		if cond == nil || cond.Status != "True" || !strings.Contains(cond.Message, `pool "tenant-a"`) || pc == nil || pc.Status != "True" {
			return fmt.Errorf("node condition %+v, pool condition %+v", cond, pc)
		}
		return nil
	})
	setRequests(t, c, "node-2", nil)

	// node-1 releases its second tenant-a block (its pods are gone).
	tb := blocks(t, c, "node-1", "tenant-a")
	setRequests(t, c, "node-1", []string{tb[1].String()}, mooringv1.PodIPAMRequest{Pool: "tenant-a", IPv4Addresses: 8})
	eventually(t, 30*time.Second, "release", func() error {
		if b := blocks(t, c, "node-1", "tenant-a"); len(b) != 1 || b[0] != tb[0] {
			return fmt.Errorf("tenant-a blocks %v", b)
		}
		return nil
	})

	// A newer overlapping pool is Conflicting; the older keeps working.
	mkPool(t, c, "late", []string{"10.250.0.0/25"}, 26, nil, 0)
	eventually(t, 30*time.Second, "conflict", func() error {
		cond := meta.FindStatusCondition(pool(t, c, "late").Status.Conditions, mooringv1.ConditionConflicting)
		if cond == nil || cond.Status != "True" || !strings.Contains(cond.Message, "tenant-a") {
			return fmt.Errorf("late conditions %+v", pool(t, c, "late").Status.Conditions)
		}
		if cond := meta.FindStatusCondition(pool(t, c, "tenant-a").Status.Conditions, mooringv1.ConditionConflicting); cond == nil || cond.Status != "False" {
			return fmt.Errorf("tenant-a conditions %+v", pool(t, c, "tenant-a").Status.Conditions)
		}
		return nil
	})
	noOverlap(t, c)
}

// TestMigrationClusterPoolToMultiPool: each node's cluster-pool block
// becomes its first block of the pool "default"; nothing is re-cut.
func TestMigrationClusterPoolToMultiPool(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	cp := podipamctl.Config{Mode: podipamctl.ModeClusterPool,
		ClusterPoolV4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, MaskV4: 24,
		ClusterPoolV6: []netip.Prefix{netip.MustParsePrefix("fd00:244::/112")}, MaskV6: 120}
	if err := podipamctl.LockMode(ctx, c, ns, cp.Mode, "test"); err != nil {
		t.Fatal(err)
	}
	mkNode(t, c, "node-1")
	mkNode(t, c, "node-2")
	stop := startPodIPAM(t, e, cp)
	before := map[string][]netip.Prefix{}
	for _, n := range []string{"node-1", "node-2"} {
		eventually(t, 30*time.Second, n, func() error {
			b := blocks(t, c, n, "default")
			if len(b) != 2 {
				return fmt.Errorf("%v", b)
			}
			before[n] = b
			return nil
		})
	}
	stop()
	if err := podipamctl.LockMode(ctx, c, ns, podipamctl.ModeMultiPool, "test"); err != nil {
		t.Fatalf("migration refused: %v", err)
	}
	mkPool(t, c, "default", []string{"10.244.0.0/16"}, 24, []string{"fd00:244::/112"}, 120)
	startPodIPAM(t, e, podipamctl.Config{Mode: podipamctl.ModeMultiPool, PreAllocate: 8})
	eventually(t, 30*time.Second, "mode recorded on the nodes", func() error {
		for _, n := range []string{"node-1", "node-2"} {
			if r := record(t, c, n); r.Status.Mode != string(podipamctl.ModeMultiPool) {
				return fmt.Errorf("%s mode %q", n, r.Status.Mode)
			}
		}
		return nil
	})
	for n, b := range before {
		if got := blocks(t, c, n, "default"); fmt.Sprint(got) != fmt.Sprint(b) {
			t.Fatalf("%s: blocks %v after migration, %v before", n, got, b)
		}
	}
	eventually(t, 10*time.Second, "default pool counts the migrated blocks", func() error {
		if s := pool(t, c, "default").Status; s.IPv4 == nil || s.IPv4.Blocks != 2 || s.Nodes != 2 {
			return fmt.Errorf("status %+v", s)
		}
		return nil
	})
}
