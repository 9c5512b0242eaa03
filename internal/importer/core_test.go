package importer

import (
	"bytes"
	"encoding/json"
	"testing"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// apiPool decodes an imported pool into the API type, strictly: every field
// the importer writes must exist in api/v1alpha1.
func apiPool(t *testing.T, p Pool) *mooringv1.LoadBalancerIPPool {
	t.Helper()
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var out mooringv1.LoadBalancerIPPool
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&out); err != nil {
		t.Fatalf("pool %s does not decode into the API type: %v", p.Metadata.Name, err)
	}
	return &out
}

// lbipamPool converts an imported pool for Mooring's allocator the way the
// controller does (internal/controller toPool), with lbipam's own block
// parsers. Selectors and namespaces are left out: they choose WHICH
// Services a pool serves, not which addresses it hands out, and are
// checked by the mapping tests.
func lbipamPool(t *testing.T, p Pool) lbipam.Pool {
	t.Helper()
	ap := apiPool(t, p)
	out := lbipam.Pool{
		Name: ap.Name, Priority: ap.Spec.Priority, Disabled: ap.Spec.Disabled,
		AllowFirstLastIPs: ap.Spec.AllowFirstLastIPs,
		ManualOnly:        ap.Spec.AutoAssign != nil && !*ap.Spec.AutoAssign,
		AvoidBuggyIPs:     ap.Spec.AvoidBuggyIPs,
	}
	for i, b := range ap.Spec.Blocks {
		var blk lbipam.Block
		var err error
		if b.CIDR != "" {
			blk, err = lbipam.ParseCIDRBlock(b.CIDR)
		} else {
			blk, err = lbipam.ParseRangeBlock(b.Start, b.Stop)
		}
		if err != nil {
			t.Fatalf("pool %s block %d: Mooring rejects the imported block: %v", p.Metadata.Name, i, err)
		}
		blk.Index = i
		out.Blocks = append(out.Blocks, blk)
	}
	return out
}

// Every imported policy decodes strictly into the API type too.
func TestImportedObjectsAreAPIObjects(t *testing.T) {
	for _, f := range []struct {
		path string
		imp  func([]Input) (*Result, error)
	}{
		{"testdata/metallb/ipaddresspools.yaml", MetalLB}, {"testdata/metallb/legacy-configmap.yaml", MetalLB},
		{"testdata/cilium/pools.yaml", Cilium}, {"testdata/cilium/l2policy.yaml", Cilium},
	} {
		res := importFile(t, f.imp, f.path)
		for _, p := range res.Pools {
			apiPool(t, p)
		}
		for _, p := range res.Policies {
			b, _ := json.Marshal(p)
			var out mooringv1.L2AnnouncementPolicy
			dec := json.NewDecoder(bytes.NewReader(b))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&out); err != nil {
				t.Errorf("%s: policy %s: %v", f.path, p.Metadata.Name, err)
			}
		}
	}
}
