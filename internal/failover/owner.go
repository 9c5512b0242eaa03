package failover

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// OwnerObserver tells which MAC the client uses for an address right now.
// It returns nil (and no error) when the client has no usable entry: none
// yet, INCOMPLETE or FAILED. Implementations: NeighbourTable (the client's
// kernel neighbour table via netlink; what the client really uses) and
// ProbeOwner (an ARP/NDP probe, e.g. netlab.Probe from the lab's client).
type OwnerObserver interface {
	Owner(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error)
}

// OwnerFunc adapts a function to OwnerObserver.
type OwnerFunc func(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error)

// Owner calls f.
func (f OwnerFunc) Owner(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error) {
	return f(ctx, addr)
}

// ErrSeveralOwners means more than one MAC answered for the address: two
// announcers, or a node whose kernel answers for a stale local copy (the
// kube-ipvs0 trap of seeds 000/001). Which one a client keeps is a race, so
// the measurement cannot trust its owner changes.
var ErrSeveralOwners = errors.New("more than one MAC answers for the address")

// ProbeOwner turns a probe that returns every MAC answering for an address
// (netlab.Probe, netlab.ProbeInterface) into an OwnerObserver. Several
// answers return the first and an error wrapping ErrSeveralOwners.
func ProbeOwner(probe func(ctx context.Context, addr netip.Addr) ([]net.HardwareAddr, error)) OwnerObserver {
	return OwnerFunc(func(ctx context.Context, addr netip.Addr) (net.HardwareAddr, error) {
		macs, err := probe(ctx, addr)
		switch {
		case err != nil:
			return nil, err
		case len(macs) == 0:
			return nil, nil
		case len(macs) > 1:
			s := make([]string, len(macs))
			for i, m := range macs {
				s[i] = m.String()
			}
			return macs[0], fmt.Errorf("%w: %s answer for %s", ErrSeveralOwners, strings.Join(s, ", "), addr)
		}
		return macs[0], nil
	})
}

// NodeMAC says which node an interface MAC belongs to.
type NodeMAC struct {
	Node string
	MAC  net.HardwareAddr
}

// NodeMACs maps the MACs a client can see to node names. Outside the lab
// the operator gives them (--node-mac node=mac): nothing in the Kubernetes
// API carries a node's MAC.
type NodeMACs []NodeMAC

// Node returns the node that owns mac, or "".
func (m NodeMACs) Node(mac net.HardwareAddr) string {
	i := slices.IndexFunc(m, func(n NodeMAC) bool { return len(mac) > 0 && bytes.Equal(n.MAC, mac) })
	if i < 0 {
		return ""
	}
	return m[i].Node
}

// ParseNodeMAC parses "node=aa:bb:cc:dd:ee:ff".
func ParseNodeMAC(s string) (NodeMAC, error) {
	node, mac, ok := strings.Cut(s, "=")
	if !ok || node == "" {
		return NodeMAC{}, fmt.Errorf("node MAC %q: want node=aa:bb:cc:dd:ee:ff", s)
	}
	hw, err := net.ParseMAC(mac)
	if err != nil {
		return NodeMAC{}, fmt.Errorf("node MAC %q: %w", s, err)
	}
	return NodeMAC{Node: node, MAC: hw}, nil
}

// describeMAC says "aa:.. (node)" or "aa:.. (unknown node)".
func describeMAC(m NodeMACs, mac net.HardwareAddr) string {
	if len(mac) == 0 {
		return "none"
	}
	if n := m.Node(mac); n != "" {
		return mac.String() + " (" + n + ")"
	}
	return mac.String() + " (unknown node)"
}
