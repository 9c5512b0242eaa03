package controller

// The pool condition AddressesOutsideNodeSubnets (issue 11 item 4, seed 002's
// first failure): a pool whose addresses lie outside every announcing
// node's L2 network hands out addresses nobody can reach, and every
// component says Ready. Node objects carry addresses but no prefix length,
// so the subnets come from the nodes' L2Announcers: each agent lists there
// the interfaces it may answer ARP/NDP on with their networks
// (status.interfaces[].prefixes), written when they change. Until an
// announcing node publishes them, the condition is Unknown: guessing a /24
// around the InternalIP would raise false alarms on any other network size.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// ConditionOutsideNodeSubnets is the pool condition: True when some of the
// pool's addresses lie outside every announcing node's subnet.
const ConditionOutsideNodeSubnets = "AddressesOutsideNodeSubnets"

// nodeSubnets is what the announcing nodes publish about their networks.
type nodeSubnets struct {
	announcing []string       // nodes some L2AnnouncementPolicy selects, sorted
	reporting  []string       // of those, the ones that publish their subnets
	subnets    []netip.Prefix // union of the published subnets, sorted
	problems   []string       // unparsable prefixes or selectors
}

// readNodeSubnets lists Nodes, L2AnnouncementPolicies and L2Announcers
// (from the cache).
func readNodeSubnets(ctx context.Context, c client.Reader) (nodeSubnets, error) {
	var nodes corev1.NodeList
	if err := c.List(ctx, &nodes); err != nil {
		return nodeSubnets{}, err
	}
	var pols mooringv1.L2AnnouncementPolicyList
	if err := c.List(ctx, &pols); err != nil {
		return nodeSubnets{}, err
	}
	var anns mooringv1.L2AnnouncerList
	if err := c.List(ctx, &anns); err != nil {
		return nodeSubnets{}, err
	}
	return computeNodeSubnets(nodes.Items, pols.Items, anns.Items), nil
}

// computeNodeSubnets: a node announces when a policy selects it; it
// reports when its L2Announcer lists a prefix on some interface.
func computeNodeSubnets(nodes []corev1.Node, pols []mooringv1.L2AnnouncementPolicy, anns []mooringv1.L2Announcer) nodeSubnets {
	var ns nodeSubnets
	var sels []labels.Selector
	for i := range pols {
		sel, err := labels.Everything(), error(nil) // absent: every node
		if ns := pols[i].Spec.NodeSelector; ns != nil {
			sel, err = metav1.LabelSelectorAsSelector(ns)
		}
		if err != nil {
			ns.problems = append(ns.problems, fmt.Sprintf("L2AnnouncementPolicy %s: nodeSelector: %v", pols[i].Name, err))
			continue
		}
		sels = append(sels, sel)
	}
	byNode := make(map[string]*mooringv1.L2Announcer, len(anns))
	for i := range anns {
		byNode[anns[i].Name] = &anns[i]
	}
	for i := range nodes {
		n := &nodes[i]
		if !slices.ContainsFunc(sels, func(s labels.Selector) bool { return s.Matches(labels.Set(n.Labels)) }) {
			continue
		}
		ns.announcing = append(ns.announcing, n.Name)
		ann := byNode[n.Name]
		if ann == nil {
			continue
		}
		reports := false
		for _, ifi := range ann.Status.Interfaces {
			for _, raw := range ifi.Prefixes {
				p, err := netip.ParsePrefix(strings.TrimSpace(raw))
				if err != nil {
					ns.problems = append(ns.problems, fmt.Sprintf("L2Announcer %s: interface %s: %q is not a CIDR", n.Name, ifi.Name, raw))
					continue
				}
				if !isNodeNetwork(p) {
					continue
				}
				reports = true
				if p = p.Masked(); !slices.Contains(ns.subnets, p) {
					ns.subnets = append(ns.subnets, p)
				}
			}
		}
		if reports {
			ns.reporting = append(ns.reporting, n.Name)
		}
	}
	slices.Sort(ns.announcing)
	slices.Sort(ns.reporting)
	slices.SortFunc(ns.subnets, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return ns
}

// isNodeNetwork says whether an interface prefix describes a network the
// node shares with others: a single address (/32, /128) is a host route —
// a stale copy of a LoadBalancer address on some interface, or a VIP on
// lo — and loopback networks reach no one, so neither counts. Counted, a
// stale /32 would both be listed as a node network and make its own
// address look "inside".
func isNodeNetwork(p netip.Prefix) bool {
	return !p.IsSingleIP() && !p.Addr().IsLoopback()
}

// subnetCondition is the pool's AddressesOutsideNodeSubnets condition.
func subnetCondition(pool lbipam.Pool, ns nodeSubnets) (metav1.ConditionStatus, string, string) {
	switch {
	case len(ns.announcing) == 0:
		return metav1.ConditionUnknown, "NoAnnouncingNode",
			"no L2AnnouncementPolicy selects a node, so no address is announced: create a policy whose nodeSelector selects the nodes on the Services' network"
	case len(ns.reporting) == 0:
		return metav1.ConditionUnknown, "SubnetsUnknown", fmt.Sprintf(
			"%d announcing node(s) (%s), none publishes its networks (L2Announcer status.interfaces[].prefixes, written by the node's mooring agent): the pool's addresses cannot be checked against them; check that the agent runs on those nodes and that a policy's interfaces match one of theirs",
			len(ns.announcing), strings.Join(firstN(ns.announcing, 5), ", "))
	}
	outside := lbipam.OutsideSubnets(pool, ns.subnets)
	partial := ""
	if len(ns.reporting) < len(ns.announcing) {
		partial = fmt.Sprintf(" (%d of %d announcing nodes publish their networks)", len(ns.reporting), len(ns.announcing))
	}
	if len(outside) == 0 {
		return metav1.ConditionFalse, "InsideNodeSubnets", "every address lies in an announcing node's network" + partial
	}
	var rs, subs []string
	for _, r := range outside {
		rs = append(rs, r.String())
	}
	for _, s := range ns.subnets {
		subs = append(subs, s.String())
	}
	return metav1.ConditionTrue, "OutsideNodeSubnets", fmt.Sprintf(
		"%s lie(s) outside the networks of every announcing node (%s)%s: Services get these addresses but ARP/NDP for them never reaches a node; move the blocks into the nodes' network, or select nodes on that network in an L2AnnouncementPolicy",
		strings.Join(rs, ", "), strings.Join(subs, ", "), partial)
}

// firstN is at most n of names, with "..." for the rest.
func firstN(names []string, n int) []string {
	if len(names) <= n {
		return names
	}
	return append(slices.Clone(names[:n]), fmt.Sprintf("... (%d more)", len(names)-n))
}
