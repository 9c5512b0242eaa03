package announce

import (
	"net/netip"
	"testing"
)

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

func ips(ss ...string) []netip.Addr {
	out := make([]netip.Addr, len(ss))
	for i, s := range ss {
		out[i] = ip(s)
	}
	return out
}

func key(name string) ServiceKey { return ServiceKey{Namespace: "default", Name: name} }

func nodes(names ...string) []Node {
	out := make([]Node, len(names))
	for i, n := range names {
		out[i] = Node{Name: n, Labels: map[string]string{"kubernetes.io/hostname": n}}
	}
	return out
}

// lab is the usual fixture: three live nodes, the local one with lo, eth0
// and eth1, and one policy announcing every Service's LoadBalancer IPs.
func lab(local string) Input {
	return Input{
		Policies: []Policy{{Name: "all", LoadBalancerIPs: true}},
		Nodes:    nodes("node-1", "node-2", "node-3"),
		Members:  []string{"node-1", "node-2", "node-3"},
		Local:    local,
		Interfaces: []Interface{
			{Name: "lo", Index: 1, Loopback: true},
			{Name: "eth0", Index: 2},
			{Name: "eth1", Index: 3},
		},
	}
}

// mustOwner asserts addr is announced and returns its owner.
func mustOwner(t *testing.T, r Result, addr string) string {
	t.Helper()
	n, ok := r.OwnerOf(ip(addr))
	if !ok {
		t.Fatalf("%s is not announced; owners %v, problems %v", addr, r.Owners, r.Problems)
	}
	return n
}

// ownerAmong returns the owner of addr among candidates, by the ranking.
func ownerAmong(addr string, candidates ...string) string {
	return Rank(candidates, ip(addr))[0]
}
