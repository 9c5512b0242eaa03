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
	// Problem: a live check (the agents' metrics or readiness, the ARP/NDP
	// audit, the API objects) sees it now. The only severity that makes
	// doctor exit 1.
	Problem Severity = "problem"
	// Warning: worth a look, not seen broken now (e.g. counters that
	// climbed since an agent started, an agent's metrics that cannot be
	// read: doctor could not look, which is not a problem it saw).
	Warning Severity = "warning"
	// History: an Event that no live check confirms now. Shown, never
	// counted.
	History Severity = "history"
	// Info: shown with --all.
	Info Severity = "info"
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
	// MetricsErr says why Metrics is nil: the read failed (unreachable,
	// blocked, an error status). "" when metrics were not asked for.
	MetricsErr string
	// Readiness is what the agent's /readyz says now; nil when not read.
	Readiness *Readiness
}

// Readiness is an agent's /readyz answer.
type Readiness struct {
	Ready bool
	// Reasons are the lines of a not-ready answer (why it does not serve).
	Reasons []string
}

// AgentMetrics are the counters doctor reads from an agent's /metrics.
type AgentMetrics struct {
	StaleLocal      float64 // mooring_stale_local_addresses
	SplitBrain      float64 // mooring_split_brain_addresses
	PolicyProblems  float64 // mooring_agent_policy_problems
	WriteErrors     float64 // mooring_agent_api_writes_total{result="error"}
	OwnershipLosses float64 // mooring_agent_ownership_changes_total{change="lost"}
	GossipInsecure  float64 // mooring_members_insecure
	// MemoryLimit is mooring_agent_memory_limit_pressure: 1 while the
	// agent's heap presses on its soft memory limit (GOMEMLIMIT).
	MemoryLimit float64
	// StepFailures count the failures of each data-plane step since the
	// agent started, by step, with the series they come from: the
	// responder's mooring_responder_errors_total{op} (steps
	// "responder-open", "responder-read", ...) and the agent's
	// mooring_agent_dataplane_failures_total{step}.
	StepFailures map[string]StepCounter
	// StepsFailing are the steps whose last attempt failed
	// (mooring_agent_dataplane_failing{step} is 1).
	StepsFailing []string
}

// StepCounter is one data-plane step's failure counter.
type StepCounter struct {
	Series string // e.g. mooring_responder_errors_total{op="open"}
	Value  float64
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
	// Node is where a Pod runs, or a Lease's holder.
	Node string
	// Service is the Service it serves, when it serves one (k3s svclb,
	// Cilium's per-Service lease).
	Service string
}

// Foreign is what other load-balancer implementations have in the
// cluster: what runs, from their Pods; whom they announce, from their own
// records (MetalLB's ServiceL2Status, Cilium's leases).
type Foreign struct {
	MetalLBSpeakers    []Workload // running (or pending) speaker Pods
	MetalLBControllers []Workload // running (or pending) controller Pods
	// MetalLBIdle are MetalLB's DaemonSets and Deployments while none of
	// their Pods runs (left behind, or scaled to zero).
	MetalLBIdle  []Workload
	MetalLBPools []Pool
	// MetalLBAnnouncers are MetalLB's ServiceL2Statuses: Service
	// namespace/name -> the node whose speaker announces it.
	MetalLBAnnouncers map[string]string
	CiliumL2Policies  []string
	// CiliumLeases are the fresh cilium-l2announce-<ns>-<svc> Leases
	// (Node: the holder); CiliumStaleLeases those nobody renews.
	CiliumLeases, CiliumStaleLeases []Workload
	KubeVIP                         []Workload
	ServiceLB                       []Workload // k3s svclb-* pods
}

// Audit is the ARP/NDP audit of the pools' addresses: who answers for
// each, asked from a host on the Services' segment.
type Audit struct {
	// Skipped says why no audit ran ("" when it ran).
	Skipped   string
	Interface string
	Addrs     []AuditAddr
	// Left are pool addresses not asked for (beyond the audit's bound).
	Left int
}

// AuditAddr is one address asked for.
type AuditAddr struct {
	Addr netip.Addr
	// Service holds it (namespace/name), "" for a free pool address.
	Service string
	// Mooring is the node Mooring's agents say announces it, "" for none.
	Mooring    string
	Responders []Responder
}

// Responder is one MAC that answered.
type Responder struct {
	MAC string
	// Node owns the MAC (the MAC that answers for its InternalIP); "" for
	// a host that is no node.
	Node string
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
	// Audit is nil when no audit was asked for.
	Audit *Audit
	// BGPPeers are the routers the agents peer with.
	BGPPeers []BGPPeer
	// BGPSessions are every node's sessions, from its BGPSpeaker.
	BGPSessions []BGPSession
}

// BGPSession is one node's session to one peer as its agent wrote it.
type BGPSession struct {
	Node, Peer, Address string
	Established         bool
	State, Reason       string
	Message             string
	// Received counts the prefixes the router sent the node.
	Received int64
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
	{"arp-audit", checkAudit},
	{"split-brain", checkSplitBrain},
	{"agent-dataplane", checkDataPlane},
	{"agent-metrics", checkMetricsReach},
	{"agent-counters", checkCounters},
	{"agent-config", checkAgentConfig},
	{"gossip-key", checkGossipKey},
	{"agent-memory-limit", checkMemoryLimit},
	{"l2-and-bgp", checkL2AndBGP},
	{"bgp-sessions", checkBGPSessions},
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
	order := map[Severity]int{Problem: 0, Warning: 1, History: 2, Info: 3}
	slices.SortStableFunc(out, func(a, b Finding) int { return cmp.Compare(order[a.Severity], order[b.Severity]) })
	return out
}

// HasProblem reports whether any finding is a Problem.
func HasProblem(fs []Finding) bool {
	return slices.ContainsFunc(fs, func(f Finding) bool { return f.Severity == Problem })
}
