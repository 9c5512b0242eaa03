package migrate

import (
	"context"
	"strings"
	"testing"

	"github.com/mooringlb/mooring/internal/importer"
	core "github.com/mooringlb/mooring/internal/migrate"
)

// A MetalLB in both L2 and BGP mode is refused before anything is read
// or changed, with what to do.
func TestBothModesRefused(t *testing.T) {
	res := &importer.Result{
		Policies: []importer.L2Policy{{Metadata: importer.Meta{Name: "l2"}}},
		BGP:      importer.BGPObjects{Peers: []importer.BGPPeer{{Metadata: importer.Meta{Name: "tor"}}}},
	}
	var f core.Facts
	_, err := importFacts(context.Background(), nil, "metallb-system", res, &f)
	if err == nil || !strings.Contains(err.Error(), "L2AnnouncementPolicies l2") || !strings.Contains(err.Error(), "BGPPeers tor") ||
		!strings.Contains(err.Error(), "hand the L2 Services over by hand first") {
		t.Fatalf("L2 and BGP: %v", err)
	}
}
