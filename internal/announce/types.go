package announce

import (
	"cmp"
	"net/netip"
	"slices"
)

// ServiceKey names a Service.
type ServiceKey struct{ Namespace, Name string }

func (k ServiceKey) String() string { return k.Namespace + "/" + k.Name }

func compareKeys(a, b ServiceKey) int {
	return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
}

// Policy is an L2AnnouncementPolicy as data.
type Policy struct {
	Name string
	// ServiceSelector and NodeSelector: nil or empty match everything.
	ServiceSelector *Selector
	NodeSelector    *Selector
	// Interfaces are RE2 expressions anchored at both ends; empty means every
	// non-loopback interface.
	Interfaces []string
	// LoadBalancerIPs announces status.loadBalancer.ingress addresses,
	// ExternalIPs announces spec.externalIPs.
	LoadBalancerIPs bool
	ExternalIPs     bool
	// Ranking orders each address's candidate nodes (rank_metallb.go).
	Ranking Ranking
}

// The virtual labels a policy's serviceSelector also matches: the
// Service's namespace and name (the same keys as the API's
// mooring.dev/service-namespace and mooring.dev/service-name; a test in
// internal/agent keeps them equal). They win over real labels of the same
// key.
const (
	LabelServiceNamespace = "mooring.dev/service-namespace"
	LabelServiceName      = "mooring.dev/service-name"
)

// Service is what the decision needs from a Service and its EndpointSlices.
// State.SetService keeps it without copying (at 10,000 Services copies
// were a third of the state): its maps and slices must not be modified
// once handed over.
type Service struct {
	Key ServiceKey
	// Labels are the Service's own labels (the virtual ones come from
	// Key).
	Labels map[string]string
	// IngressIPs are status.loadBalancer.ingress IPs, in status order (the
	// first is what RankingMetalLB hashes for all of them); ExternalIPs are
	// spec.externalIPs. Invalid, unspecified, loopback, multicast and
	// link-local addresses are ignored.
	IngressIPs  []netip.Addr
	ExternalIPs []netip.Addr
	// LocalTraffic is externalTrafficPolicy: Local: only nodes listed in
	// ReadyNodes (a ready local endpoint) may announce.
	LocalTraffic bool
	ReadyNodes   []string
}

// Node is a Kubernetes Node as data.
type Node struct {
	Name   string
	Labels map[string]string
}

// Interface is one network interface of the local node.
type Interface struct {
	Name     string
	Index    int
	Loopback bool
}

// Input is everything one decision needs. Order inside every slice is
// irrelevant, but for a Service's IngressIPs under RankingMetalLB: the
// same sets give the same Result.
type Input struct {
	Policies []Policy
	Services []Service
	Nodes    []Node
	// Members are the names of the live gossip members (the local node
	// included, when it has joined).
	Members []string
	// Local is the local node's name; Interfaces are its interfaces.
	Local      string
	Interfaces []Interface
	// Capabilities, when non-nil, limits each member to the policies it
	// can serve (eligibility.go); nil keeps every live member eligible.
	Capabilities Capabilities
}

// Entry is one (address, interface) pair the local node must answer for.
type Entry struct {
	Addr    netip.Addr
	IfIndex int
	IfName  string
}

// Owner says who announces one address.
type Owner struct {
	Addr netip.Addr
	// Node is the owner, "" when no live node is eligible.
	Node string
	// Services are the Services holding the address (several when shared).
	Services []ServiceKey
	// Eligible is the number of live eligible nodes: the owner plus its
	// stand-ins.
	Eligible int
}

// Problem is something an operator must fix; the rest keeps working.
type Problem struct {
	// Policy is set for a policy problem (the policy is skipped).
	Policy string
	// Addr is set for an address problem.
	Addr netip.Addr
	// Field is the offending spec field, e.g. "spec.interfaces[1]".
	Field   string
	Message string
}

// Result is the decision.
type Result struct {
	// Local is what the local node answers for, sorted by interface index
	// then address.
	Local []Entry
	// Owners lists every announced address, sorted.
	Owners []Owner
	// Problems are sorted by policy, then address, then field.
	Problems []Problem
	// Listen are the local interfaces any valid policy could announce on,
	// whether or not this node is selected: where the kernel's own ARP
	// replies would collide with the owner's (see StaleLocal).
	Listen []Interface
	// StatusWriter is the one node that writes policy status: the
	// lexicographically first live node selected by a valid policy (else the
	// first live known node), so agents do not race on it.
	StatusWriter string
}

// Desired is Local grouped by interface index, the responder's input.
func (r Result) Desired() map[int][]netip.Addr {
	out := make(map[int][]netip.Addr)
	for _, e := range r.Local {
		out[e.IfIndex] = append(out[e.IfIndex], e.Addr)
	}
	return out
}

// OwnerOf returns the owner of addr ("" if unowned) and whether addr is
// announced at all. Cost: O(log n).
func (r Result) OwnerOf(addr netip.Addr) (string, bool) {
	i, ok := slices.BinarySearchFunc(r.Owners, addr.Unmap(), func(o Owner, a netip.Addr) int { return o.Addr.Compare(a) })
	if !ok {
		return "", false
	}
	return r.Owners[i].Node, true
}

// PolicyProblems returns the problems of the named policy.
func (r Result) PolicyProblems(name string) []Problem {
	var out []Problem
	for _, p := range r.Problems {
		if p.Policy == name {
			out = append(out, p)
		}
	}
	return out
}
