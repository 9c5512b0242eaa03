package podipamctl_test

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/podipamctl"
)

func clusterPoolConfig() podipamctl.Config {
	return podipamctl.Config{Mode: podipamctl.ModeClusterPool,
		ClusterPoolV4: []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16")}, MaskV4: 24,
		ClusterPoolV6: []netip.Prefix{netip.MustParsePrefix("fd00:10:244::/56")}, MaskV6: 120}
}

// TestClusterPool: one block per registered node and family, unique (a
// Node no agent registered gets none); an empty
// node.spec.podCIDRs gets Mooring's blocks; a different one gets a Node
// condition and an Event; a restarted controller keeps every block and
// cuts new ones around them; a deleted Node's blocks are released.
func TestClusterPool(t *testing.T) {
	e := startEnv(t)
	ctx := context.Background()
	c := e.Client
	mkNode(t, c, "node-1")
	mkNode(t, c, "node-2")
	mkNode(t, c, "node-3", "10.99.0.0/24") // kube-controller-manager cut another one
	mkBareNode(t, c, "no-agent")           // never registered by an agent
	stop := startPodIPAM(t, e, clusterPoolConfig())

	got := map[string][]netip.Prefix{}
	for _, n := range []string{"node-1", "node-2", "node-3"} {
		eventually(t, 30*time.Second, n+" blocks", func() error {
			b := blocks(t, c, n, "")
			if v4, v6 := families(b); v4 != 1 || v6 != 1 {
				return fmt.Errorf("blocks %v", b)
			}
			got[n] = b
			return nil
		})
	}
	noOverlap(t, c)
	if r := record(t, c, "no-agent"); r.Name != "" {
		t.Fatalf("the controller created a record for a node no agent registered: %+v", r.Status)
	}
	for _, n := range []string{"node-1", "node-2"} {
		eventually(t, 30*time.Second, n+" podCIDRs", func() error {
			var node corev1.Node
			if err := c.Get(ctx, client.ObjectKey{Name: n}, &node); err != nil {
				return err
			}
			want := []string{got[n][0].String(), got[n][1].String()}
			if node.Spec.PodCIDR != want[0] || strings.Join(node.Spec.PodCIDRs, ",") != strings.Join(want, ",") {
				return fmt.Errorf("spec.podCIDRs %v, want %v", node.Spec.PodCIDRs, want)
			}
			return nil
		})
	}
	eventually(t, 30*time.Second, "node-3 mismatch condition", func() error {
		var node corev1.Node
		if err := c.Get(ctx, client.ObjectKey{Name: "node-3"}, &node); err != nil {
			return err
		}
		for _, cond := range node.Status.Conditions {
			if cond.Type == mooringv1.ConditionPodCIDRMismatch && cond.Status == corev1.ConditionTrue && strings.Contains(cond.Message, "10.99.0.0/24") {
				return nil
			}
		}
		return fmt.Errorf("conditions %+v", node.Status.Conditions)
	})
	eventually(t, 10*time.Second, "mismatch Event", func() error {
		if len(events(t, c, "PodCIDRMismatch")) == 0 {
			return fmt.Errorf("no PodCIDRMismatch Event")
		}
		return nil
	})

	// Restart: every block stays; a new node gets a new one.
	stop()
	mkNode(t, c, "node-4")
	startPodIPAM(t, e, clusterPoolConfig())
	eventually(t, 30*time.Second, "node-4 blocks", func() error {
		if v4, v6 := families(blocks(t, c, "node-4", "")); v4 != 1 || v6 != 1 {
			return fmt.Errorf("node-4 has %d/%d", v4, v6)
		}
		return nil
	})
	for n, b := range got {
		if fmt.Sprint(blocks(t, c, n, "")) != fmt.Sprint(b) {
			t.Fatalf("restart changed %s's blocks: %v → %v", n, b, blocks(t, c, n, ""))
		}
	}
	noOverlap(t, c)

	// A deleted Node's record goes, and its block is cut again for the next node.
	if err := c.Delete(ctx, &corev1.Node{ObjectMeta: metavObj("node-1")}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "node-1 record deleted", func() error {
		if r := record(t, c, "node-1"); r.Name != "" {
			return fmt.Errorf("record still there: %v", r.Status.Blocks)
		}
		return nil
	})
	mkNode(t, c, "node-5")
	eventually(t, 30*time.Second, "node-5 reuses node-1's block", func() error {
		if b := blocks(t, c, "node-5", ""); len(b) != 2 || b[0] != got["node-1"][0] {
			return fmt.Errorf("node-5 blocks %v, node-1 had %v", b, got["node-1"])
		}
		return nil
	})
	noOverlap(t, c)
}
