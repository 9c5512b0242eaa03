package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// MaxAnnouncerProblems caps status.problems; status.problemCount has the
// full number.
const MaxAnnouncerProblems = 64

// Reasons of an AnnouncementProblem.
const (
	// ProblemNoEligibleNode: no live node may announce the address (the
	// policies' nodeSelector, gossip, or for externalTrafficPolicy: Local
	// the ready endpoints). Recorded by the status writer node only.
	ProblemNoEligibleNode = "NoEligibleNode"
	// ProblemNoMatchingInterface: this node owns the address but none of its
	// interfaces match the policies' interfaces.
	ProblemNoMatchingInterface = "NoMatchingInterface"
	// ProblemResponderFailed: this node owns the address and the
	// interface matches, but its agent cannot answer ARP/NDP there (the
	// responder's sockets fail to open; it retries while it runs): the
	// address is not announced although the decision names this node.
	ProblemResponderFailed = "ResponderFailed"
)

// L2AnnouncerStatus is what one node's agent decides on besides the API
// objects (Services, EndpointSlices, Nodes, L2AnnouncementPolicies): with
// both, `announce.Decide` names the node and interfaces announcing every
// address, so nothing is written per Service. It is written when it
// changes (a member joins or leaves, an interface, a problem), never per
// Service.
type L2AnnouncerStatus struct {
	// Members are the live gossip members this agent sees, itself included,
	// sorted.
	//
	// +optional
	// +listType=atomic
	Members []string `json:"members,omitempty"`

	// Interfaces are the node's interfaces any valid policy may announce on.
	//
	// +optional
	// +listType=atomic
	Interfaces []AnnouncerInterface `json:"interfaces,omitempty"`

	// Capability is where this node can answer, as it also publishes in
	// gossip: the decision limits each node to the policies it can serve.
	// Absent when the agent publishes none.
	//
	// +optional
	Capability *AnnouncerCapability `json:"capability,omitempty"`

	// Problems are the addresses this node knows cannot be announced as
	// asked, at most MaxAnnouncerProblems of them, sorted by address.
	//
	// +optional
	// +listType=atomic
	Problems []AnnouncementProblem `json:"problems,omitempty"`

	// ProblemCount is the number of problems, listed or not.
	//
	// +optional
	ProblemCount int32 `json:"problemCount,omitempty"`

	// StatusWriter is set on the one node that records cluster-wide problems
	// (no eligible node); the agents agree on it without talking.
	//
	// +optional
	StatusWriter bool `json:"statusWriter,omitempty"`

	// Applied is the configuration this agent's last published decision
	// used: `mooring doctor` compares it with the cluster's to find agents
	// running on an old configuration. Absent until the agent has read
	// the policies (and from agents older than this field).
	//
	// +optional
	Applied *AppliedConfig `json:"applied,omitempty"`

	// Lost are the nodes whose pods this agent marks NotReady (fast
	// endpoint eviction): gossip lost them and their kernel answers no
	// ARP/NDP. The agent lists a node here before it marks any of its
	// pods and removes it when the node is back or gone; the admission
	// policy mooring-agent-eviction lets an agent mark only pods of the
	// nodes its own L2Announcer lists here, never its own node's. Sorted.
	//
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=5000
	// +kubebuilder:validation:items:MaxLength=253
	Lost []string `json:"lost,omitempty"`
}

// AppliedConfig is the configuration an agent decided with.
type AppliedConfig struct {
	// Policies are the L2AnnouncementPolicies it used, each with the
	// metadata.generation it read, sorted by name.
	//
	// +optional
	// +listType=atomic
	Policies []AppliedGeneration `json:"policies,omitempty"`
}

// AppliedGeneration is one object's name and metadata.generation.
type AppliedGeneration struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
}

// AnnouncerInterface is one network interface of the node.
type AnnouncerInterface struct {
	Name  string `json:"name"`
	Index int32  `json:"index"`

	// Prefixes are the networks of the interface's addresses, in CIDR form
	// (an address 192.168.1.10/24 gives 192.168.1.0/24), sorted; link-local
	// networks are left out. The controller checks pools against them (the
	// pool condition AddressesOutsideNodeSubnets).
	//
	// +optional
	// +listType=atomic
	Prefixes []string `json:"prefixes,omitempty"`
}

// AnnouncerCapability is where a node can answer ARP/NDP.
type AnnouncerCapability struct {
	// Any: every interface (no restriction).
	//
	// +optional
	Any bool `json:"any,omitempty"`
	// Interfaces the node can answer on.
	//
	// +optional
	// +listType=atomic
	Interfaces []string `json:"interfaces,omitempty"`
	// Defaults are the interfaces used for policies that name none.
	//
	// +optional
	// +listType=atomic
	Defaults []string `json:"defaults,omitempty"`
}

// AnnouncementProblem is one address that is not announced as asked.
type AnnouncementProblem struct {
	Address string `json:"address"`
	// Services hold the address, as namespace/name.
	//
	// +optional
	// +listType=atomic
	Services []string `json:"services,omitempty"`
	Reason   string   `json:"reason"`
	Message  string   `json:"message"`
}

// L2Announcer is one node's L2 announcement agent, named after its Node.
// Only that node's agent may write it (a ValidatingAdmissionPolicy in
// config/agent binds writes to the node in the caller's ServiceAccount
// token).
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=l2announcer,categories=mooring
// +kubebuilder:printcolumn:name="Members",type=string,JSONPath=`.status.members`
// +kubebuilder:printcolumn:name="Problems",type=integer,JSONPath=`.status.problemCount`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type L2Announcer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Status L2AnnouncerStatus `json:"status,omitempty"`
}

// L2AnnouncerList is a list of L2Announcers.
//
// +kubebuilder:object:root=true
type L2AnnouncerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []L2Announcer `json:"items"`
}

func init() {
	SchemeBuilder.Register(func(s *runtime.Scheme) error {
		s.AddKnownTypes(GroupVersion, &L2Announcer{}, &L2AnnouncerList{})
		return nil
	})
}
