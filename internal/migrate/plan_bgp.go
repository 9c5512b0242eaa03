package migrate

import (
	"fmt"
	"strings"
)

// SpeakerLabel marks, during a BGP hand-over, the nodes whose MetalLB
// speaker still runs (value "on"): the speakers' DaemonSet is pinned to
// it, and Mooring's BGPPeers are applied with a node-selector term that
// requires it absent. Removing it from one node hands that node over.
const SpeakerLabel = "mooring.dev/metallb-speaker"

// planBGP is the plan for MetalLB in BGP mode. A router keeps one session
// per neighbour address, and MetalLB's speaker and Mooring's agent on one
// node would both open theirs from the node's address: on one node they
// cannot overlap. So the hand-over goes node by node, and the route stays
// at the router throughout because the other nodes' next hops stay in it
// while one node's sessions change hands.
func planBGP(f Facts) []Step {
	ns := f.MetalLBNamespace
	always := []CheckID{CheckAddressesUnchanged, CheckNoStaleLocal, CheckTraffic}
	var pin, unpin []string
	for _, n := range f.SpeakerNodes {
		pin = append(pin, fmt.Sprintf("kubectl label node %s %s=on", n, SpeakerLabel))
	}
	for _, s := range f.Speakers {
		pin = append(pin, fmt.Sprintf(`kubectl -n %s patch daemonset %s --type merge -p '{"spec":{"updateStrategy":{"type":"OnDelete","rollingUpdate":null},"template":{"spec":{"nodeSelector":{%q:"on"}}}}}'`, ns, s, SpeakerLabel))
		unpin = append(unpin, fmt.Sprintf(`kubectl -n %s patch daemonset %s --type json -p '[{"op":"remove","path":"/spec/template/spec/nodeSelector/%s"},{"op":"replace","path":"/spec/updateStrategy","value":{"type":"RollingUpdate"}}]'`,
			ns, s, strings.ReplaceAll(SpeakerLabel, "/", "~1")))
	}
	for _, n := range f.SpeakerNodes {
		unpin = append(unpin, fmt.Sprintf("kubectl label node %s %s-", n, SpeakerLabel))
	}
	steps := []Step{{
		Kind:     KindPreChecks,
		Name:     "pre-checks",
		Why:      "refuse to start on a cluster whose addresses or controller would not survive the hand-over",
		Actions:  []string{fmt.Sprintf("record the addresses of %d LoadBalancer Services", len(f.Services)), "the Mooring controller must run with --adopt-only and the agents with --bgp on every node MetalLB's speakers run on"},
		Checks:   append([]CheckID{CheckAdoptOnly, CheckGossipPort}, always...),
		Rollback: []string{"nothing changed"},
	}, {
		Kind:     KindPinSpeakers,
		Name:     "pin MetalLB's speakers to the nodes they run on",
		Why:      "each speaker must be stoppable on its own node, one at a time, without restarting the others: the nodes that run one get the label " + SpeakerLabel + "=on and the DaemonSet requires it, with updateStrategy OnDelete (a changed pod template would otherwise roll every speaker, resetting its sessions)",
		Actions:  pin,
		Checks:   append([]CheckID{CheckAdoptOnly, CheckSpeakersKept}, always...),
		Rollback: unpin,
	}, {
		Kind: KindApply,
		Name: "apply Mooring's pools and BGP objects while MetalLB still runs",
		Why: fmt.Sprintf("the controller adopts each Service's held address (the imported pools hold exactly MetalLB's addresses); the BGPPeers %s get one more node-selector requirement, %s DoesNotExist, so that no agent opens a session from a node whose speaker still has one",
			strings.Join(f.BGPPeers, ", "), SpeakerLabel),
		Actions:  []string{fmt.Sprintf("kubectl apply -f %s   # LoadBalancerIPPools %s; BGPPeers %s with the requirement %s DoesNotExist", f.ImportFile, strings.Join(f.Pools, ", "), strings.Join(f.BGPPeers, ", "), SpeakerLabel)},
		Checks:   append([]CheckID{CheckAdoptOnly, CheckSpeakersKept}, always...),
		Rollback: []string{fmt.Sprintf("kubectl delete -f %s", f.ImportFile)},
	}}
	for _, n := range f.SpeakerNodes {
		steps = append(steps, Step{
			Kind: KindHandOverNode, Node: n,
			Name: fmt.Sprintf("hand node %s's BGP sessions over to Mooring", n),
			Why: "the label goes: the DaemonSet controller stops the node's speaker (its sessions close and the router drops this node's paths, while every other node's stay: the route does not leave the router when more than one node advertises it; " +
				"a Service advertised from this node alone — externalTrafficPolicy: Local with its only endpoints here — is unreachable until Mooring's session is up, a few seconds), " +
				"and Mooring's BGPPeers now select the node: its agent opens the sessions and advertises the same addresses",
			Actions:  []string{fmt.Sprintf("kubectl label node %s %s-", n, SpeakerLabel)},
			Checks:   append([]CheckID{CheckAdoptOnly, CheckBGPNodeHandedOver}, always...),
			Rollback: []string{fmt.Sprintf("kubectl label node %s %s=on   # Mooring's agent closes its sessions there, MetalLB's speaker comes back", n, SpeakerLabel)},
		})
	}
	final := fmt.Sprintf("kubectl apply -f %s   # the BGPPeers without the %s requirement (no node has the label any more: no session changes)", f.ImportFile, SpeakerLabel)
	return append(steps, removeSteps(f, append([]CheckID{CheckAdoptOnly, CheckSpeakersGone}, always...), []string{final})...)
}
