package foreignlb

import (
	"net/netip"
	"slices"
	"strings"
)

// Implementations' names, as the tools print them.
const (
	MetalLB = "MetalLB"
	Cilium  = "Cilium"
)

// Snapshot is what other implementations have in the cluster.
type Snapshot struct {
	MetalLB   MetalLBState
	Cilium    CiliumState
	KubeVIP   []Workload // Pods (static or of a DaemonSet) named kube-vip*
	ServiceLB []Workload // k3s svclb-* Pods
}

// Workload is one running piece of another implementation.
type Workload struct {
	Kind, Namespace, Name string
	// Node is where a Pod runs ("" when not scheduled).
	Node string
	// Service is the Service it serves, namespace/name, when it serves one
	// (k3s svclb).
	Service string
}

// String is "Kind namespace/name" (with " on node" for a scheduled Pod).
func (w Workload) String() string {
	s := w.Kind + " " + w.Namespace + "/" + w.Name
	if w.Node != "" {
		s += " on " + w.Node
	}
	return s
}

// MetalLBState is MetalLB's part of the cluster.
type MetalLBState struct {
	// Speakers and Controllers are MetalLB's Pods that run or are about to
	// (phase Running or Pending).
	Speakers, Controllers []Workload
	// SpeakerSets and ControllerSets are its DaemonSets and Deployments,
	// whatever their status.
	SpeakerSets, ControllerSets []Workload
	Pools                       []Pool
	// Announcers are MetalLB's ServiceL2Statuses (v0.14+), by Service
	// namespace/name: the node whose speaker answers ARP/NDP for the
	// Service's addresses.
	Announcers map[string]L2Status
	// Allocated are the Services MetalLB's controller gave an address,
	// with the pool (the Service's metallb.io/ip-allocated-from-pool
	// annotation).
	Allocated map[string]string
}

// Installed says whether any workload of MetalLB exists.
func (m MetalLBState) Installed() bool {
	return len(m.SpeakerSets)+len(m.ControllerSets)+len(m.Speakers)+len(m.Controllers) > 0
}

// L2Status is one MetalLB ServiceL2Status.
type L2Status struct {
	Node       string
	Interfaces []string
	// Object is the ServiceL2Status, namespace/name.
	Object string
}

// Pool is one IPAddressPool, namespace/name.
type Pool struct {
	Name   string
	Ranges []Range
}

// Range is an inclusive address range.
type Range struct{ First, Last netip.Addr }

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// CiliumState is Cilium's L2 announcement part.
type CiliumState struct {
	Policies []string // CiliumL2AnnouncementPolicy names
	// Leases are the cilium-l2announce-<namespace>-<service> Leases, by
	// the Service they name (namespace/name) when it exists.
	Leases map[string]Lease
	// Unmatched are such Leases for no existing Service.
	Unmatched []Lease
}

// Lease is one Cilium per-Service lease; its holder answers ARP.
type Lease struct {
	Namespace, Name string
	Holder          string
	// Fresh: renewed within its duration (a lease nobody renews is a
	// leftover, not an announcer).
	Fresh bool
}

// Announcer is another implementation's announcer of a Service.
type Announcer struct {
	Implementation string // MetalLB or Cilium
	Node           string
	Interfaces     []string
	// Source says where this comes from, e.g. "ServiceL2Status
	// metallb-system/l2-abcde" or "Lease kube-system/cilium-l2announce-d-web".
	Source string
}

// By is "node/if[+if]" ("node" without interfaces).
func (a Announcer) By() string {
	if len(a.Interfaces) == 0 {
		return a.Node
	}
	return a.Node + "/" + strings.Join(a.Interfaces, "+")
}

// Serving returns who of the other implementations announces the Service
// (namespace/name) now: MetalLB's speaker named by a ServiceL2Status while
// a speaker Pod runs on that node, Cilium's lease holder while the lease is
// fresh. Empty when none.
func (s Snapshot) Serving(svc string) []Announcer {
	var out []Announcer
	if st, ok := s.MetalLB.Announcers[svc]; ok && st.Node != "" &&
		slices.ContainsFunc(s.MetalLB.Speakers, func(w Workload) bool { return w.Node == st.Node }) {
		out = append(out, Announcer{Implementation: MetalLB, Node: st.Node, Interfaces: st.Interfaces, Source: "ServiceL2Status " + st.Object})
	}
	if l, ok := s.Cilium.Leases[svc]; ok && l.Fresh && l.Holder != "" {
		out = append(out, Announcer{Implementation: Cilium, Node: l.Holder, Source: "Lease " + l.Namespace + "/" + l.Name})
	}
	return out
}

// MetalLBPool is the MetalLB pool holding a, "" when none.
func (s Snapshot) MetalLBPool(a netip.Addr) string {
	for _, p := range s.MetalLB.Pools {
		if slices.ContainsFunc(p.Ranges, func(r Range) bool { return r.Contains(a) }) {
			return p.Name
		}
	}
	return ""
}

// Active says whether another implementation runs: MetalLB speakers or
// controllers, Cilium L2 policies or fresh leases, kube-vip, servicelb.
func (s Snapshot) Active() bool {
	fresh := false
	for _, l := range s.Cilium.Leases {
		fresh = fresh || l.Fresh
	}
	return len(s.MetalLB.Speakers)+len(s.MetalLB.Controllers)+len(s.Cilium.Policies)+len(s.KubeVIP)+len(s.ServiceLB) > 0 || fresh
}
