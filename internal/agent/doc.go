// Package agent is the L2 announcement agent (`mooring agent`, one per node):
// the thin adapter around the pure decision core internal/announce.
//
// Data flows one way: informer caches (Services, EndpointSlices, Nodes,
// L2AnnouncementPolicies) and the gossip member set (internal/membership) are
// converted into announce.Input (convert.go); announce.Decide returns the
// local (address, interface) table and every address's owner; the table goes
// to the raw-socket responder (internal/responder), the rest to the status
// writer (status.go) and the safety checks (safety.go).
//
// Nothing on the way from a membership change to responder.Apply touches the
// API server, so failover works while it is unreachable. The election writes
// nothing: the agent never writes a Service; it updates its own node's
// L2Announcer only when its view changes (members, interfaces, problems),
// records an Event for a move or a problem, and writes policy status when a
// policy's validity changes (only the status writer chosen by the core does,
// so agents never race on it).
//
// Safety checks: a stale local copy of an announced address that this
// node's kernel would answer ARP for by itself (the kube-ipvs0 trap), and a
// split brain (another MAC answering for an address this node announces).
//
// It may import Kubernetes client libraries and Mooring's adapters; the
// decision logic itself belongs in internal/announce.
//
// Agents may read Services but never write them: a compromised node must
// not be able to rewrite another Service's selector or addresses. What an
// agent records goes to its own L2Announcer, which a
// ValidatingAdmissionPolicy (config/agent) lets only that node write.
//
// +kubebuilder:rbac:groups="",resources=services,verbs=list;watch
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcers,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcers/status,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcementpolicies,verbs=list;watch
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcementpolicies/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create
package agent
