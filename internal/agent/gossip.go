package agent

import (
	"net"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooringlb/mooring/internal/membership"
)

// namedPeers is a Members that joins peers by node name
// (membership.SetNodePeers): a dual-stack node is one peer, not two.
type namedPeers interface {
	SetNodePeers(map[string][]string)
}

func (a *Agent) setMemberPeers(nodes []corev1.Node, peers []string) {
	known := 0
	for i := range nodes {
		if n := &nodes[i]; n.Name != a.cfg.NodeName && slices.ContainsFunc(n.Status.Addresses, func(ad corev1.NodeAddress) bool {
			return ad.Type == corev1.NodeInternalIP && ad.Address != ""
		}) {
			known++
		}
	}
	a.ready.peers.Store(int32(known))
	np, ok := a.deps.Members.(namedPeers)
	if !ok {
		a.deps.Members.SetPeers(peers)
		return
	}
	byName := map[string][]string{}
	for i := range nodes {
		n := &nodes[i]
		if n.Name == a.cfg.NodeName {
			continue
		}
		for _, ad := range n.Status.Addresses {
			if ad.Type == corev1.NodeInternalIP && ad.Address != "" {
				byName[n.Name] = append(byName[n.Name], net.JoinHostPort(ad.Address, strconv.Itoa(a.cfg.GossipPort)))
			}
		}
	}
	np.SetNodePeers(byName)
}

// membershipConfig is the gossip configuration the agent's flags give.
func (c Config) membershipConfig() membership.Config {
	mc := membership.Config{
		NodeName: c.NodeName, BindAddr: c.GossipBind, BindPort: c.GossipPort, AdvertiseAddr: c.GossipAdvertise,
		KeyFile: c.GossipKeyFile, SuspicionMult: c.GossipSuspicionMult,
		NodeCheckWait: c.NodeCheckWait, AgentLossTimeout: c.AgentLossTimeout,
	}
	if c.NodeCheckWait > 0 {
		mc.NodeCheck = kernelCheck(c.NodeCheckWait)
	}
	return mc
}
