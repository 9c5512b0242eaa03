// Package agent is the L2 announcement agent (`mooring agent`, one per node):
// the wiring of its rooms and the decision loop, a thin adapter around the
// pure decision core internal/announce.
//
// Data flows one way: informer caches (Services and EndpointSlices in the
// compact store, Nodes, L2AnnouncementPolicies) and the gossip member set
// are converted (convert) into announce.State's input; the state returns
// the changes of the local (address, interface) table and every address's
// owner; the table goes to the raw-socket responder (internal/responder),
// the pass to the announcement backends, the whole decision to the status
// writer, the safety checks and the snapshot. Level-triggered and
// incremental: a Service event re-decides that Service's addresses only.
//
// Where each concern lives (each package's doc.go says what it owns and
// may import):
//
//	agent (this)   wiring (Run, New, Config, Deps), the decision loop
//	               (loop.go), the responder table (table.go) and its
//	               hand-overs, make before break, to returning peers and
//	               from a node that stops serving (handing.go), SIGTERM's
//	               hand-over before the responder and gossip stop
//	               (leave.go), the capabilities and stall glue
//	               (capabilities.go), start-up from caches or snapshot
//	               (start.go)
//	convert        API objects -> announce input (the one conversion layer)
//	store          the compact Service/EndpointSlice store, slim informer
//	               transforms, the EndpointSlice index
//	memory         GC target and start-up memory release
//	snapshot       the local snapshot under --state-dir: format, writer,
//	               reader, the snapshot-to-live switch
//	gossip         partition rule (fail-safe members), deferrals and
//	               releases, gossip peers from the Nodes
//	eligibility    who is a candidate: usable links, published gossip
//	               metadata, confirmations of returning peers
//	handoff        returning nodes: hold-down, take after confirmation,
//	               stalls, SIGTERM ordering
//	safety         stale local copy check, split-brain probe
//	status         L2Announcer, policy status, Events, API write counts;
//	               Announcements (who announces, from the API alone)
//	evict          fast endpoint eviction and conntrack clean-up
//	host           netlink links, sysctls, raw ARP/NDP probe, kernel check
//	health         /metrics, /healthz, /readyz
//	ipam           the pod IPAM node side inside the agent
//	backend        the seam for announcement backends beside L2
//	mailbox        latest-value hand-over between loops
//	agenttest      fakes and fixtures for the rooms' unit tests
//
// Nothing on the way from a membership change to responder.Update touches
// the API server, so failover works while it is unreachable. The election
// writes nothing: the agent never writes a Service; it updates its own
// node's L2Announcer only when its view changes (members, interfaces,
// problems), records an Event for a move or a problem, and writes policy
// status when a policy's validity changes (only the status writer chosen
// by the core does, so agents never race on it).
//
// # Announcement backends
//
// A second way to announce (a BGP speaker: the pure internal/bgp with its
// adapter internal/agent/bgp) plugs in beside the L2 responder through
// backend.Backend, listed in Deps.Backends (Run builds the real ones). After
// every pass the loop calls Backend.Pass, on its own goroutine and right
// after the responder's update, with a backend.Pass: the Services it read
// in that pass converted exactly as the L2 state got them (all of them,
// Full, on the first pass and after a relist or the snapshot-to-live
// switch), the Services deleted, the Nodes when re-read, the live members
// after the partition rule, every candidate's capability, whether this
// node is a candidate now (not holding down or stalled) and the L2
// changes. Pass must not block and a backend writes nothing to the API
// server; the agent runs Backend.Run with its other parts.
//
// Agents may read Services but never write them: a compromised node must
// not be able to rewrite another Service's selector or addresses. What an
// agent records goes to its own L2Announcer, which a
// ValidatingAdmissionPolicy (config/agent) lets only that node write.
//
// It may import Kubernetes client libraries and Mooring's adapters; the
// decision logic itself belongs in internal/announce.
//
// +kubebuilder:rbac:groups="",resources=services,verbs=list;watch
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcers,verbs=get;list;watch;create
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcers/status,verbs=update
// +kubebuilder:rbac:groups="",resources=nodes,verbs=list;watch
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=list;watch
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcementpolicies,verbs=list;watch
// +kubebuilder:rbac:groups=mooring.dev,resources=l2announcementpolicies/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create
//
// The recorded pod IPAM mode (one ConfigMap in the controller's namespace):
// every agent reads it, also with pod IPAM off, so that an agent started
// before the mode is recorded begins serving pod addresses when it is.
//
// +kubebuilder:rbac:groups="",namespace=mooring-system,resources=configmaps,resourceNames=mooring-pod-ipam-mode,verbs=get;list;watch
package agent
