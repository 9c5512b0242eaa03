// Package doctor holds `mooring doctor`'s checks as data: each check is a
// pure function from a snapshot of the cluster (and, where given, of the
// nodes) to findings. It imports nothing from k8s.io: the adapter in
// internal/doctor/gather reads the cluster, read-only, and fills Inputs.
package doctor

import (
	"cmp"
	"net/netip"
	"slices"
	"time"
)

// Severity orders findings; any Problem makes `mooring doctor` exit 1.
type Severity string

const (
	Problem Severity = "problem"
	Warning Severity = "warning"
	Info    Severity = "info"
)

// Finding is one thing an operator should know, with the fix.
type Finding struct {
	Check    string   `json:"check"`
	Severity Severity `json:"severity"`
	Object   string   `json:"object,omitempty"` // pool, Service, ConfigMap, workload
	Node     string   `json:"node,omitempty"`
	Address  string   `json:"address,omitempty"`
	Message  string   `json:"message"`
	Fix      string   `json:"fix,omitempty"`
}

// Range is an inclusive address range.
type Range struct{ First, Last netip.Addr }

func (r Range) String() string {
	if r.First == r.Last {
		return r.First.String()
	}
	return r.First.String() + "-" + r.Last.String()
}

// Contains reports whether a lies in r.
func (r Range) Contains(a netip.Addr) bool {
	return a.Is4() == r.First.Is4() && r.First.Compare(a) <= 0 && a.Compare(r.Last) <= 0
}

// Pool is one LoadBalancerIPPool (or another system's pool).
type Pool struct {
	Name     string
	Ranges   []Range
	Disabled bool
	// BGP: a valid BGPAdvertisement selects the pool, so its addresses are
	// routed to the nodes and need not lie on their segment.
	BGP bool
}

// Node is one Node and what is known about its L2 segment.
type Node struct {
	Name string
	// Subnets are the networks of the node's interfaces: given by the
	// operator or read on the node; when none is known the adapter assumes
	// the /24 (/64) around each InternalIP and sets SubnetsAssumed.
	Subnets        []netip.Prefix
	SubnetsAssumed bool
	// Addresses are the node's own (status.addresses: InternalIP and
	// ExternalIP), which no pool may hand to a Service.
	Addresses []netip.Addr
	// Announcing: some L2AnnouncementPolicy's nodeSelector selects it.
	Announcing bool
	// Metrics are the node's agent metrics; nil when not available.
	Metrics *AgentMetrics
}

// AgentMetrics are the counters doctor reads from an agent's /metrics.
type AgentMetrics struct {
	StaleLocal      float64 // mooring_stale_local_addresses
	SplitBrain      float64 // mooring_split_brain_addresses
	PolicyProblems  float64 // mooring_agent_policy_problems
	WriteErrors     float64 // mooring_agent_api_writes_total{result="error"}
	OwnershipLosses float64 // mooring_agent_ownership_changes_total{change="lost"}
	GossipInsecure  float64 // mooring_members_insecure
}

// Service is one LoadBalancer Service.
type Service struct {
	Namespace, Name string
	Addrs           []netip.Addr
	// AnnouncedBy maps each address to the node the Mooring agent named.
	AnnouncedBy map[netip.Addr]string
	// Ours: Mooring serves the Service (its class, or no class with
	// Mooring as the default).
	Ours bool
	// AdvertisedBy maps each address advertised over BGP to the nodes
	// advertising it (the BGP decision recomputed from the API objects).
	AdvertisedBy map[netip.Addr][]string
}

// Key is namespace/name.
func (s Service) Key() string { return s.Namespace + "/" + s.Name }

// Event is an agent Event on a Service (StaleLocalAddress, L2SplitBrain).
type Event struct {
	Reason, Message string
	Service         string // namespace/name
	Node            string // the reporting agent's node
	Age             string // human readable, for the message
	Time            time.Time
}

// KubeProxy is kube-proxy's configuration (kube-system/kube-proxy).
type KubeProxy struct {
	Found     bool
	Mode      string // "", iptables, ipvs, nftables
	StrictARP bool
}

// Workload is another implementation's running piece.
type Workload struct {
	Kind, Namespace, Name string
	// Service is the Service it serves, when it serves one (k3s svclb,
	// Cilium's per-Service lease).
	Service string
}

// Foreign is what other load-balancer implementations have in the cluster.
type Foreign struct {
	MetalLBSpeakers  []Workload
	MetalLBPools     []Pool
	CiliumL2Policies []string
	CiliumLeases     []Workload // cilium-l2announce-<ns>-<svc>
	KubeVIP          []Workload
	ServiceLB        []Workload // k3s svclb-* pods
}

// Inputs is one snapshot.
type Inputs struct {
	Pools     []Pool
	Policies  int // L2AnnouncementPolicies
	Nodes     []Node
	Services  []Service
	Events    []Event
	KubeProxy KubeProxy
	Foreign   Foreign
	// PolicyGenerations are the cluster's L2AnnouncementPolicies by name,
	// with their metadata.generation.
	PolicyGenerations map[string]int64
	// Agents are what each agent reports it decided with (its L2Announcer).
	Agents []Agent
	// BGPPeers are the routers the agents peer with.
	BGPPeers []BGPPeer
}

// BGPPeer is one BGPPeer's name and address.
type BGPPeer struct {
	Name    string
	Address netip.Addr
}

// Agent is one agent's applied configuration.
type Agent struct {
	Node string
	// Reports: the agent publishes its applied configuration (older agents
	// do not; neither does one that has not read the policies yet).
	Reports bool
	// Policies are the L2AnnouncementPolicies it used, by name, with the
	// generation it read.
	Policies map[string]int64
}

// Check is one named check.
type Check struct {
	Name string
	Run  func(Inputs) []Finding
}

// Checks are every check, in the order they are reported.
var Checks = []Check{
	{"pool-subnet", checkPoolSubnets},
	{"pool-node-address", checkPoolNodeAddresses},
	{"stale-local-address", checkStale},
	{"kube-proxy", checkKubeProxy},
	{"other-load-balancer", checkForeign},
	{"split-brain", checkSplitBrain},
	{"agent-counters", checkCounters},
	{"agent-config", checkAgentConfig},
	{"gossip-key", checkGossipKey},
	{"l2-and-bgp", checkL2AndBGP},
}

// Run runs every check and returns the findings, problems first.
func Run(in Inputs) []Finding {
	var out []Finding
	for _, c := range Checks {
		for _, f := range c.Run(in) {
			f.Check = c.Name
			out = append(out, f)
		}
	}
	order := map[Severity]int{Problem: 0, Warning: 1, Info: 2}
	slices.SortStableFunc(out, func(a, b Finding) int { return cmp.Compare(order[a.Severity], order[b.Severity]) })
	return out
}

// HasProblem reports whether any finding is a Problem.
func HasProblem(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == Problem })
}
