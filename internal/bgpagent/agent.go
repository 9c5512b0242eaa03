package bgpagent

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/backend"
)

// The agent's BGP permissions, a role of their own (mooring-agent-bgp),
// bound only when the agent runs with --bgp: the BGP objects and the pools
// (read from the agent's cache), Namespaces (advertisements may select by
// them), this node (to own its BGPSpeaker), the node's BGPSpeaker (an
// admission policy limits each agent to its own), the conditions of the
// peers and advertisements (one agent writes them), and get — neither list
// nor watch — on Secrets in Mooring's namespace, the peers' passwords.
//
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups=mooring.dev,resources=bgppeers;bgpadvertisements;bgpcommunities;bfdprofiles;loadbalancerippools,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups=mooring.dev,resources=bgppeers/status;bgpadvertisements/status,verbs=patch
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups=mooring.dev,resources=bgpspeakers,verbs=get;create
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups=mooring.dev,resources=bgpspeakers/status,verbs=update
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups="",resources=namespaces,verbs=list;watch
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups="",resources=nodes,verbs=get
// +kubebuilder:rbac:roleName=mooring-agent-bgp,groups="",namespace=mooring-system,resources=secrets,verbs=get

// Watched are the objects whose changes need a new decision besides the
// Services and Nodes, which come with the agent's passes. The agent's
// informer cache watches them and calls Trigger; the backend runs no
// informers of its own.
func Watched() []client.Object {
	return []client.Object{&mooringv1.BGPPeer{}, &mooringv1.BGPAdvertisement{}, &mooringv1.BGPCommunity{},
		&mooringv1.BFDProfile{}, &mooringv1.LoadBalancerIPPool{}, &corev1.Namespace{}}
}

// Pass implements backend.Backend: it takes the pass's Services (the same
// the L2 decision read) and makes the first live member by name the one
// agent that writes the BGP objects' conditions. It returns at once.
//
// The pass's Serving (an L2 hold-down, a stall) does not withdraw BGP
// routes: a node's BGP routes follow the BGP decision alone (its peers'
// node selectors, externalTrafficPolicy: Local endpoints); a node that
// dies loses its routes at the router (BFD, hold time), one that restarts
// keeps them as stale (graceful restart).
func (b *Backend) Pass(p *backend.Pass) {
	b.SetStatusWriter(len(p.Members) > 0 && slices.Min(p.Members) == b.cfg.Node)
	b.SetServices(p.Full, p.Services, p.Deleted)
}

var _ backend.Backend = (*Backend)(nil)
