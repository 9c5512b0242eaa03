package doctor

import (
	"fmt"
	"slices"
	"strings"
)

// checkPoolNodeAddresses: a pool that contains a node's own address can
// hand it to a Service; the announcing node then answers ARP/NDP for
// another machine's address and takes its traffic (the node's kubelet,
// SSH, the API server's view of it). A disabled pool hands out nothing new,
// but a Service may still hold the address: a warning.
func checkPoolNodeAddresses(in Inputs) []Finding {
	var out []Finding
	for _, p := range in.Pools {
		for _, r := range p.Ranges {
			var hits []string
			for _, n := range in.Nodes {
				for _, a := range n.Addresses {
					if r.Contains(a) {
						hits = append(hits, fmt.Sprintf("%s (node %s)", a, n.Name))
					}
				}
			}
			if len(hits) == 0 {
				continue
			}
			slices.Sort(hits)
			sev, state := Problem, "a Service given it takes that node's traffic: the announcing node answers ARP/NDP for it"
			if p.Disabled {
				sev, state = Warning, "the pool is disabled, but a Service may still hold it"
			}
			out = append(out, Finding{Severity: sev, Object: "LoadBalancerIPPool/" + p.Name, Address: r.String(),
				Message: fmt.Sprintf("pool %s: %s contains the node address(es) %s: %s", p.Name, r, strings.Join(hits, ", "), state),
				Fix:     "remove the nodes' addresses from the pool: split the block into ranges around them, or move the pool to addresses no machine uses"})
		}
	}
	return out
}
