package v1alpha1

// Names that Mooring reads from or writes to objects it does not own
// (Services, Events), kept in one place so operators find them in one guess.
const (
	// LoadBalancerClass is the spec.loadBalancerClass that Mooring serves
	// (besides Services with no class, unless configured otherwise).
	LoadBalancerClass = "mooring.dev/lb"

	// AnnotationIPs requests addresses: comma-separated, at most one per family.
	AnnotationIPs = "mooring.dev/ips"
	// AnnotationPool restricts allocation to the named pools (comma-separated).
	AnnotationPool = "mooring.dev/pool"
	// AnnotationSharingKey lets Services with the same key share an address
	// when their ports and protocols do not collide.
	AnnotationSharingKey = "mooring.dev/sharing-key"
	// AnnotationSharingCrossNamespace opts a Service in to sharing its address
	// with Services of other namespaces; both sides must set it to "true".
	AnnotationSharingCrossNamespace = "mooring.dev/sharing-cross-namespace"
	// AnnotationAnnouncedBy was written by the agent that announced the
	// Service's addresses ("node/interface" per address).
	//
	// Deprecated: since issue 13 the agents write no Service and nothing
	// reads it; who announces comes from the L2Announcers
	// (internal/agent Announcements). Kept so a leftover can be named.
	AnnotationAnnouncedBy = "mooring.dev/announced-by"

	// LabelServiceNamespace and LabelServiceName are virtual labels a pool's
	// serviceSelector can match.
	LabelServiceNamespace = "mooring.dev/service-namespace"
	LabelServiceName      = "mooring.dev/service-name"

	// ConditionAddressAssigned is the Service condition that says whether its
	// addresses are assigned, and if not, why.
	ConditionAddressAssigned = "mooring.dev/AddressAssigned"
	// ConditionAddressOutsidePools warns that a held address lies outside
	// every pool; the Service keeps it.
	ConditionAddressOutsidePools = "mooring.dev/AddressOutsidePools"
	// ConditionAddressDuplicated warns that a held address is also held by
	// another Service that sharing does not allow (imported that way, e.g.
	// from another controller); both keep it until one lets go.
	ConditionAddressDuplicated = "mooring.dev/AddressDuplicated"
	// ConditionAnnounced is the Service condition that names the announcing node.
	ConditionAnnounced = "mooring.dev/Announced"

	// Pool and policy condition types.
	ConditionReady         = "Ready"
	ConditionConflicting   = "Conflicting"
	ConditionInvalidBlocks = "InvalidBlocks"
	ConditionInvalidSpec   = "InvalidSpec"
)

// Event reasons the L2 agent records on Services.
const (
	// EventReasonAnnounced: a node took over answering for an address.
	EventReasonAnnounced = "L2Announced"
	// EventReasonUnannounced: no node answers for an address any more.
	EventReasonUnannounced = "L2Unannounced"
	// EventReasonStaleLocalAddress: a node's kernel answers ARP for an
	// announced address by itself (the address is configured on one of its
	// interfaces with arp_ignore=0): a second responder.
	EventReasonStaleLocalAddress = "StaleLocalAddress"
	// EventReasonSplitBrain: another MAC answered for an address this node
	// announces.
	EventReasonSplitBrain = "L2SplitBrain"
)
