package importer

import (
	"testing"

	"github.com/mooringlb/mooring/internal/lbipam"
)

// unsupportedByCore says why Mooring's allocator cannot yet be asked about
// a pool ("" when it can).
func unsupportedByCore(p Pool) string {
	switch {
	case p.Spec.AutoAssign != nil && !*p.Spec.AutoAssign:
		return "autoAssign: false is not in internal/lbipam yet"
	case p.Spec.AvoidBuggyIPs:
		return "avoidBuggyIPs is not in internal/lbipam yet"
	}
	return ""
}

// lbipamPool converts an imported pool for Mooring's allocator, with
// lbipam's own block parsers (the controller's conversion does the same).
func lbipamPool(t *testing.T, p Pool) lbipam.Pool {
	t.Helper()
	out := lbipam.Pool{Name: p.Metadata.Name, Disabled: p.Spec.Disabled, AllowFirstLastIPs: p.Spec.AllowFirstLastIPs}
	for i, b := range p.Spec.Blocks {
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
		out.Blocks = append(out.Blocks, blk)
	}
	return out
}
