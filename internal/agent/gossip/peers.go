package gossip

import (
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooringlb/mooring/internal/agent/convert"
)

// namedPeers is a Members that joins peers by node name
// (membership.SetNodePeers): a dual-stack node is one peer, not two.
type namedPeers interface {
	SetNodePeers(map[string][]string)
}

// Peers is what SetPeers needs of membership.
type Peers interface {
	SetPeers(addrs []string)
}

// SetPeers hands gossip the peers of nodes (every node but self, at its
// InternalIPs and port), by node name when it can join that way, and
// returns how many other nodes gossip should reach.
func SetPeers(m Peers, nodes []corev1.Node, self string, port int) (known int) {
	byName := map[string][]string{}
	for i := range nodes {
		n := &nodes[i]
		if n.Name == self {
			continue
		}
		for _, ad := range n.Status.Addresses {
			if ad.Type == corev1.NodeInternalIP && ad.Address != "" {
				byName[n.Name] = append(byName[n.Name], net.JoinHostPort(ad.Address, strconv.Itoa(port)))
			}
		}
	}
	if np, ok := m.(namedPeers); ok {
		np.SetNodePeers(byName)
	} else {
		peers := convert.PeersOf(nodes, self, port)
		slices.Sort(peers)
		m.SetPeers(peers)
	}
	return len(byName)
}
