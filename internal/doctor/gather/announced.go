package gather

import (
	"context"
	"net/netip"
	"slices"

	"sigs.k8s.io/controller-runtime/pkg/client"

	agentstatus "github.com/mooringlb/mooring/internal/agent/status"
)

// Announced returns, per address, the node whose agent announces it, as
// the agents themselves decide it from the API (internal/agent
// Announcements: Services, EndpointSlices, Nodes, policies and each node's
// L2Announcer). An address counts only when the owner's own agent claims
// it. A nil reader returns nothing.
func Announced(ctx context.Context, r client.Reader) (map[netip.Addr]string, error) {
	out := map[netip.Addr]string{}
	if r == nil {
		return out, nil
	}
	anns, err := agentstatus.Announcements(ctx, r)
	if err != nil {
		return nil, err
	}
	for _, a := range anns {
		if a.Node != "" && slices.Contains(a.Claimants, a.Node) {
			out[a.Addr] = a.Node
		}
	}
	return out, nil
}
