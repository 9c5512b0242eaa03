package status

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/agent/convert"
	"github.com/mooringlb/mooring/internal/announce"
)

// Announcement is who announces one address, as the API shows it.
type Announcement struct {
	Addr     netip.Addr
	Services []announce.ServiceKey
	// Node announces Addr on Interfaces; "" when no node does.
	Node       string
	Interfaces []string
	// Claimants are the nodes whose agent, by its own gossip view, owns
	// Addr: normally exactly Node. Several mean the agents' views differ
	// (a partition, or an agent that stopped writing); none with Node set
	// means the owner has no L2Announcer yet.
	Claimants []string
	// Reason says why Addr is not announced (Node ""), or what is wrong.
	Reason string
}

// Announcements names the node and interfaces announcing every address,
// from the API alone: the Services, EndpointSlices, Nodes and policies the
// agents read, and each node's L2Announcer (its gossip view and
// interfaces), through the same decision the agents make. The agents write
// nothing per Service; this is how `mooring status` shows who announces.
// Cost: one decision per distinct gossip view (normally one), plus
// O(A·P) for the interfaces.
func Announcements(ctx context.Context, r client.Reader) ([]Announcement, error) {
	var (
		pols  mooringv1.L2AnnouncementPolicyList
		svcs  corev1.ServiceList
		es    discoveryv1.EndpointSliceList
		nodes corev1.NodeList
		anns  mooringv1.L2AnnouncerList
	)
	for _, l := range []client.ObjectList{&pols, &svcs, &es, &nodes, &anns} {
		if err := r.List(ctx, l); err != nil {
			return nil, fmt.Errorf("listing %T: %w", l, err)
		}
	}
	in := convert.Input(convert.Objects{Policies: pols.Items, Services: svcs.Items, Slices: es.Items, Nodes: nodes.Items})
	ifaces, mainView := announcerViews(&in, anns.Items)
	decide := func(view string) announce.Result {
		in.Members = nil
		if view != "" {
			in.Members = strings.Split(view, ",")
		}
		return announce.Decide(in)
	}
	main := decide(mainView)
	claims := claimsOf(in.Members, mainView, main, anns.Items, decide)
	onIfaces := announce.OwnerInterfaces(in, main.Owners, ifaces)
	out := make([]Announcement, 0, len(main.Owners))
	for _, o := range main.Owners {
		an := Announcement{Addr: o.Addr, Services: o.Services, Node: o.Node, Interfaces: onIfaces[o.Addr], Claimants: claims[o.Addr]}
		slices.Sort(an.Claimants)
		switch {
		case o.Node == "":
			an.Reason = problemFor(main, o.Addr, "no live node may announce it")
		case len(an.Interfaces) == 0 && len(ifaces[o.Node]) > 0:
			an.Reason = problemFor(main, o.Addr, "none of the owner's interfaces match the policies' interfaces")
		case len(an.Claimants) > 1:
			an.Reason = fmt.Sprintf("the agents disagree: %s each consider themselves the owner (different gossip views)", strings.Join(an.Claimants, ", "))
		}
		out = append(out, an)
	}
	return out, nil
}

// announcerViews sets in's capabilities from the L2Announcers and returns
// every node's interfaces and the gossip view (joined members) most agents
// hold: it names the owner; ties go to the larger.
func announcerViews(in *announce.Input, anns []mooringv1.L2Announcer) (map[string][]announce.Interface, string) {
	ifaces := map[string][]announce.Interface{}
	shared := map[string]int{} // gossip view -> agents holding it
	for _, a := range anns {
		// Each agent publishes its own capability; the agents share them
		// in gossip, so the decision limits each node the same way.
		if c := a.Status.Capability; c != nil {
			if in.Capabilities == nil {
				in.Capabilities = announce.Capabilities{}
			}
			in.Capabilities[a.Name] = announce.Capability{Any: c.Any, Interfaces: c.Interfaces, Defaults: c.Defaults}
		}
		for _, i := range a.Status.Interfaces {
			ifaces[a.Name] = append(ifaces[a.Name], announce.Interface{Name: i.Name, Index: int(i.Index)})
		}
		shared[strings.Join(a.Status.Members, ",")]++
	}
	mainView, best := "", 0
	for v, n := range shared {
		if n > best || (n == best && len(v) > len(mainView)) || (n == best && len(v) == len(mainView) && v < mainView) {
			mainView, best = v, n
		}
	}
	return ifaces, mainView
}

// claimsOf returns, per address, the agents that consider themselves its
// owner by their own gossip view; only agents the main view holds live
// count: a dead node's L2Announcer keeps its last view.
func claimsOf(members []string, mainView string, main announce.Result, anns []mooringv1.L2Announcer,
	decide func(view string) announce.Result) map[netip.Addr][]string {
	live := map[string]bool{}
	for _, m := range members {
		live[m] = true
	}
	views := map[string]announce.Result{mainView: main}
	claims := map[netip.Addr][]string{}
	for _, a := range anns {
		if !live[a.Name] {
			continue
		}
		v := strings.Join(a.Status.Members, ",")
		res, ok := views[v]
		if !ok {
			res = decide(v)
			views[v] = res
		}
		for _, o := range res.Owners {
			if o.Node == a.Name {
				claims[o.Addr] = append(claims[o.Addr], a.Name)
			}
		}
	}
	return claims
}

func problemFor(res announce.Result, a netip.Addr, fallback string) string {
	for _, p := range res.Problems {
		if p.Addr == a {
			return p.Message
		}
	}
	return fallback
}
