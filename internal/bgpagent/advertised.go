package bgpagent

import (
	"cmp"
	"context"
	"fmt"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/bgp"
)

// Advertised is what `mooring status` and `mooring doctor` show of BGP,
// read from the API: every node's decision, recomputed the way the agents
// make it (bgp.Decide for every node from the same objects), and every
// node's BGPSpeaker, its sessions as its agent last wrote them.
type Advertised struct {
	// Known is false when the BGP objects are not installed or none
	// exists: the rest is empty.
	Known bool
	// Routes maps each address some node's decision advertises to who
	// carries it.
	Routes map[netip.Addr][]Carrier
	// Pools are the pools some valid advertisement selects.
	Pools    []string
	Peers    []mooringv1.BGPPeer
	Speakers []mooringv1.BGPSpeaker
}

// Carrier is one node advertising an address to one peer, and whether
// that node's BGPSpeaker shows the session Established.
type Carrier struct {
	Node, Peer  string
	Established bool
	// State and Reason are the session's as the BGPSpeaker shows them
	// (empty when the node has not written one).
	State  mooringv1.BGPSessionState
	Reason string
}

// ReadAdvertised lists the BGP objects, pools, Nodes, Services,
// EndpointSlices and BGPSpeakers (and the Namespaces when some
// advertisement selects by them) through r and decides for every node.
// Without any BGPPeer or BGPAdvertisement (or without Mooring's BGP CRDs)
// it returns the zero value.
func ReadAdvertised(ctx context.Context, r client.Reader) (Advertised, error) {
	var (
		peers mooringv1.BGPPeerList
		advs  mooringv1.BGPAdvertisementList
	)
	for _, l := range []client.ObjectList{&peers, &advs} {
		if err := r.List(ctx, l); err != nil {
			if notInstalled(err) {
				return Advertised{}, nil
			}
			return Advertised{}, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	if len(peers.Items) == 0 && len(advs.Items) == 0 {
		return Advertised{}, nil
	}
	var (
		comms    mooringv1.BGPCommunityList
		bfds     mooringv1.BFDProfileList
		pools    mooringv1.LoadBalancerIPPoolList
		nodes    corev1.NodeList
		ns       corev1.NamespaceList
		svcs     corev1.ServiceList
		eps      discoveryv1.EndpointSliceList
		speakers mooringv1.BGPSpeakerList
	)
	lists := []client.ObjectList{&comms, &bfds, &pools, &nodes, &svcs, &eps, &speakers}
	if slices.ContainsFunc(advs.Items, func(a mooringv1.BGPAdvertisement) bool { return len(a.Spec.NamespaceSelectors) > 0 }) {
		lists = append(lists, &ns) // a cluster's Namespaces are read only when some advertisement selects by them
	}
	for _, l := range lists {
		if err := r.List(ctx, l); err != nil {
			return Advertised{}, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	in := Input(Objects{Peers: peers.Items, Advertisements: advs.Items, Communities: comms.Items, BFDProfiles: bfds.Items,
		Pools: pools.Items, Namespaces: ns.Items, Nodes: nodes.Items})
	converted := convert.Input(convert.Objects{Services: svcs.Items, Slices: eps.Items, Nodes: nodes.Items}).Services
	for i := range converted {
		in.Services = append(in.Services, &converted[i])
	}
	res := bgp.Decide(in)
	return Advertised{Known: true, Routes: carriers(res, in.Services, speakers.Items), Pools: bgp.AdvertisedPools(in),
		Peers: peers.Items, Speakers: speakers.Items}, nil
}

// notInstalled: the API server does not know the kind (no CRD).
func notInstalled(err error) bool {
	return meta.IsNoMatchError(err) || apierrors.IsNotFound(err)
}

// carriers maps every Service address that an open session's route
// carries (its own /32 or /128, or an aggregate holding it) to the node and
// peer carrying it, with the session's state from the node's BGPSpeaker.
func carriers(res bgp.Result, svcs []*announce.Service, speakers []mooringv1.BGPSpeaker) map[netip.Addr][]Carrier {
	sessions := map[[2]string]mooringv1.BGPPeerSession{}
	for _, s := range speakers {
		for _, p := range s.Status.Peers {
			sessions[[2]string{s.Name, p.Name}] = p
		}
	}
	var addrs []netip.Addr // every Service address, for the aggregates
	for _, s := range svcs {
		addrs = append(append(addrs, s.IngressIPs...), s.ExternalIPs...)
	}
	out := map[netip.Addr][]Carrier{}
	for _, n := range res.Nodes {
		for _, s := range n.Sessions {
			if s.Blocked != "" {
				continue
			}
			st, ok := sessions[[2]string{n.Node, s.Peer}]
			c := Carrier{Node: n.Node, Peer: s.Peer}
			if ok {
				c.State, c.Reason, c.Established = st.State, st.Reason, st.State == mooringv1.BGPStateEstablished
			}
			for _, rt := range s.Routes {
				if a := rt.Prefix.Addr(); rt.Prefix.Bits() == a.BitLen() {
					out[a] = append(out[a], c)
					continue
				}
				for _, a := range addrs {
					if rt.Prefix.Contains(a) && !slices.Contains(out[a], c) {
						out[a] = append(out[a], c)
					}
				}
			}
		}
	}
	for a := range out {
		slices.SortFunc(out[a], func(x, y Carrier) int { return cmp.Or(cmp.Compare(x.Node, y.Node), cmp.Compare(x.Peer, y.Peer)) })
		out[a] = slices.Compact(out[a])
	}
	return out
}
