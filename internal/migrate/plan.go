// Package migrate is the ordered hand-over from MetalLB to Mooring (field
// notes §3) as data: Plan turns what is known about the cluster into steps,
// each with what it applies or removes, the checks that must pass after it,
// and how to undo it. The Kubernetes side (internal/migrate/cluster) makes
// the steps happen and runs the checks; nothing here talks to a cluster.
//
// The order is the one that lost no request in the field: stale addresses
// gone first; Mooring's pools and L2 policies applied while MetalLB still
// runs (two responders are harmless when any node can serve, and the
// Service status never changes because Mooring adopts the held address);
// only then MetalLB's speakers go, then its webhook (a webhook without a
// backend blocks deletion of its own resources), controller and objects.
package migrate

import (
	"fmt"
	"io"
	"slices"
	"strings"
)

// CheckID names a check run between steps.
type CheckID string

const (
	// CheckAddressesUnchanged: every LoadBalancer Service holds exactly the
	// addresses recorded before the migration.
	CheckAddressesUnchanged CheckID = "addresses-unchanged"
	// CheckNoStaleLocal: no node holds an announced address on a local
	// interface with arp_ignore=0 (the kube-ipvs0 trap).
	CheckNoStaleLocal CheckID = "no-stale-local-address"
	// CheckStrictARP: kube-proxy is not in IPVS mode without strictARP.
	CheckStrictARP CheckID = "kube-proxy-strict-arp"
	// CheckMooringAnnounces: a Mooring agent names itself the announcer of
	// every address.
	CheckMooringAnnounces CheckID = "mooring-announces-every-address"
	// CheckResponders: ARP/NDP responders per address, counted from a host
	// on the segment (--interface), each named by node (the MAC that
	// answers for the node's InternalIP): every responder must be an
	// announcer — MetalLB's (its ServiceL2Status) while the speakers may
	// run, Mooring's owner once its policies are applied — so at most
	// MetalLB's and Mooring's while both run, exactly Mooring's owner after.
	// A node that answers and announces nothing holds a stale local copy.
	CheckResponders CheckID = "responders"
	// CheckAdoptOnly: the leading Mooring controller runs with --adopt-only
	// (it publishes its flags on its leader-election Lease), so that it
	// writes nothing to the Services MetalLB still serves.
	CheckAdoptOnly CheckID = "controller-adopt-only"
	// CheckTraffic: the operator's probe (--probe URL) has not failed since
	// the previous check.
	CheckTraffic CheckID = "traffic"
	// CheckSpeakersGone: no MetalLB speaker pod runs.
	CheckSpeakersGone CheckID = "metallb-speakers-gone"
	// CheckSpeakersKept: every speaker pod that ran before the migration
	// still runs, the same pod (BGP: pinning them restarted none).
	CheckSpeakersKept CheckID = "metallb-speakers-kept"
	// CheckGossipPort: Mooring's agents do not gossip on the port MetalLB's
	// speakers hold for memberlist (both default to 7946, both on the
	// nodes' network): else the agents cannot form their cluster while
	// the speakers run.
	CheckGossipPort CheckID = "gossip-port-free"
	// CheckBGPNodeHandedOver: the step's node runs no MetalLB speaker and
	// its Mooring BGPSpeaker shows every session Established.
	CheckBGPNodeHandedOver CheckID = "bgp-node-handed-over"
)

// StepKind says what a step does (cluster.Runner acts on it).
type StepKind string

const (
	KindPreChecks     StepKind = "pre-checks"
	KindApply         StepKind = "apply"
	KindWithdrawL2    StepKind = "withdraw-l2-speakers"
	KindPinSpeakers   StepKind = "pin-bgp-speakers"
	KindHandOverNode  StepKind = "hand-over-bgp-node"
	KindRemoveMetalLB StepKind = "remove-metallb"
	KindServeServices StepKind = "serve-new-services"
)

// Facts is what the planner knows about the cluster.
type Facts struct {
	MetalLBNamespace string
	Speakers         []string // DaemonSets
	Controllers      []string // Deployments
	Webhooks         []string // ValidatingWebhookConfigurations of MetalLB
	MetalLBObjects   []string // "Kind namespace/name" to delete at the end
	Pools, Policies  []string // Mooring objects the import produced
	// KeepsMetalLBNodes: every imported policy has ranking: MetalLB, so
	// each address's Mooring owner is the node whose speaker announces it.
	KeepsMetalLBNodes bool
	Services          []string // namespace/name=addr,addr of every LoadBalancer Service
	// Interface is where responders are counted; "" skips that check.
	Interface string
	// Probe is the operator's traffic URL; "" skips that check.
	Probe string
	// LeaseNamespace and LeaseName are the Mooring controller's
	// leader-election Lease, where the leader publishes its flags.
	LeaseNamespace, LeaseName string
	// ImportFile is where the imported Mooring objects are written;
	// SaveDir is where run saves every MetalLB object before deleting it.
	ImportFile, SaveDir string
	// BGPPeers are the Mooring BGPPeers the import produced from MetalLB's
	// BGP mode (plan_bgp.go); SpeakerNodes the nodes MetalLB's speakers
	// run on, handed over one at a time.
	BGPPeers, SpeakerNodes []string
}

// Step is one stage of the migration.
type Step struct {
	Kind StepKind `json:"kind"`
	// Node is the node a KindHandOverNode step hands over.
	Node     string    `json:"node,omitempty"`
	Name     string    `json:"name"`
	Why      string    `json:"why"`
	Actions  []string  `json:"actions"`
	Checks   []CheckID `json:"checks"`
	Rollback []string  `json:"rollback"`
	// MaxResponders is what CheckResponders allows after this step.
	MaxResponders int `json:"maxResponders,omitempty"`
	// MetalLBAnnounces: MetalLB's speakers may still answer after this
	// step, so MetalLB's announcer counts as a known responder.
	MetalLBAnnounces bool `json:"metallbAnnounces,omitempty"`
}

// SpeakerOffLabel is the node label the speakers' nodeSelector is patched
// to require, which no node has: the DaemonSet scales to zero and comes
// back when the patch is reverted.
const SpeakerOffLabel = "mooring.dev/metallb-speaker-off"

// Plan returns the ordered steps for f.
func Plan(f Facts) []Step {
	if len(f.BGPPeers) > 0 {
		return planBGP(f)
	}
	ns := f.MetalLBNamespace
	always := []CheckID{CheckAddressesUnchanged, CheckNoStaleLocal, CheckTraffic}
	steps := []Step{{
		Kind: KindPreChecks,
		Name: "pre-checks",
		Why:  "refuse to start on a cluster where an L2 hand-over cannot be observed: stale local copies of the addresses or IPVS without strictARP make every node answer ARP",
		Actions: []string{
			fmt.Sprintf("record the addresses of %d LoadBalancer Services", len(f.Services)),
			"the Mooring controller must run with --adopt-only (it never gives a Service a new address) and the agents on every node that may announce",
		},
		Checks:           append([]CheckID{CheckStrictARP, CheckAdoptOnly, CheckGossipPort, CheckResponders}, always...),
		MaxResponders:    1,
		MetalLBAnnounces: true,
		Rollback:         []string{"nothing changed"},
	}, {
		Kind: KindApply,
		Name: "apply Mooring pools and L2 policies while MetalLB still runs",
		Why:  "the controller adopts each Service's held address (the imported pools hold exactly MetalLB's addresses) and the agents start answering ARP beside the speakers: two responders are harmless when any node can serve (externalTrafficPolicy: Cluster)" + rankingWhy(f),
		Actions: []string{
			fmt.Sprintf("kubectl apply -f %s   # LoadBalancerIPPools %s; L2AnnouncementPolicies %s", f.ImportFile, strings.Join(f.Pools, ", "), strings.Join(f.Policies, ", ")),
		},
		Checks:           append([]CheckID{CheckAdoptOnly, CheckMooringAnnounces, CheckResponders}, always...),
		MaxResponders:    overlapResponders(f),
		MetalLBAnnounces: true,
		Rollback:         []string{fmt.Sprintf("kubectl delete -f %s", f.ImportFile)},
	}}
	// The speakers stop announcing together first: deleting the
	// L2Advertisements makes every speaker withdraw at once. Stopping the
	// speakers one by one instead would let the remaining ones take over
	// the leavers' addresses (memberlist) and pull clients back to MetalLB's
	// nodes with gratuitous ARPs — each such move resets the connections in
	// flight.
	scale := []string{fmt.Sprintf("kubectl -n %s delete l2advertisements.metallb.io --all   # saved to %s/metallb-l2advertisements.yaml; then wait until MetalLB's ServiceL2Statuses are gone", ns, f.SaveDir)}
	unscale := []string{fmt.Sprintf("kubectl apply -f %s/metallb-l2advertisements.yaml", f.SaveDir)}
	for _, s := range f.Speakers {
		scale = append(scale, fmt.Sprintf(`kubectl -n %s patch daemonset %s --type merge -p '{"spec":{"template":{"spec":{"nodeSelector":{%q:"true"}}}}}'`, ns, s, SpeakerOffLabel))
		unscale = append(unscale, fmt.Sprintf(`kubectl -n %s patch daemonset %s --type json -p '[{"op":"remove","path":"/spec/template/spec/nodeSelector/%s"}]'`, ns, s, strings.ReplaceAll(SpeakerOffLabel, "/", "~1")))
	}
	steps = append(steps, Step{
		Kind:          KindWithdrawL2,
		Name:          "scale MetalLB's speakers to zero",
		Why:           "Mooring's agents now answer for every address; the speakers' gratuitous ARPs would otherwise keep pulling traffic to their nodes. They withdraw together (no L2Advertisement) before they stop, so none takes over another's address on the way out",
		Actions:       scale,
		Checks:        append([]CheckID{CheckAdoptOnly, CheckSpeakersGone, CheckMooringAnnounces, CheckResponders}, always...),
		MaxResponders: 1,
		Rollback:      unscale,
	})
	return append(steps, removeSteps(f, append([]CheckID{CheckAdoptOnly, CheckMooringAnnounces, CheckResponders}, always...), nil)...)
}

// removeSteps are the last two steps: MetalLB removed (after extra, its
// first actions), then the controller's flag.
func removeSteps(f Facts, checks []CheckID, extra []string) []Step {
	ns := f.MetalLBNamespace
	always := []CheckID{CheckAddressesUnchanged, CheckNoStaleLocal, CheckTraffic}
	del := slices.Clone(extra)
	for _, w := range f.Webhooks {
		del = append(del, "kubectl delete validatingwebhookconfiguration "+w+"   # first: a webhook without a backend blocks deleting MetalLB's own objects")
	}
	for _, d := range f.Controllers {
		del = append(del, fmt.Sprintf("kubectl -n %s delete deployment %s --wait   # then wait until its pods are gone", ns, d))
	}
	for _, o := range f.MetalLBObjects {
		del = append(del, "kubectl delete "+o)
	}
	for _, s := range f.Speakers {
		del = append(del, fmt.Sprintf("kubectl -n %s delete daemonset %s", ns, s))
	}
	return []Step{{
		Kind:          KindRemoveMetalLB,
		Name:          "remove MetalLB",
		Why:           "nothing of MetalLB serves traffic any more; removing the webhook first lets its custom resources be deleted, and its controller must be gone before its pools are (a running MetalLB controller takes the addresses of a deleted pool off the Services)",
		Actions:       del,
		Checks:        checks,
		MaxResponders: 1,
		Rollback:      []string{fmt.Sprintf("reinstall MetalLB from its manifest or chart, then `kubectl apply -f %s` (every MetalLB object, saved before deletion); its controller adopts the same addresses", f.SaveDir)},
	}, {
		Kind:     KindServeServices,
		Name:     "let Mooring serve new Services",
		Why:      "until now the controller only adopted; new Services still need someone to hand out addresses",
		Actions:  []string{"restart the Mooring controller without --adopt-only"},
		Checks:   always,
		Rollback: []string{"restart the Mooring controller with --adopt-only"},
	}}
}

// overlapResponders is how many nodes may answer for an address while both
// MetalLB and Mooring announce: one when Mooring keeps MetalLB's nodes.
func overlapResponders(f Facts) int {
	if f.KeepsMetalLBNodes {
		return 1
	}
	return 2
}

// rankingWhy says whether the hand-over moves addresses.
func rankingWhy(f Facts) string {
	if f.KeepsMetalLBNodes {
		return "; the imported policies have ranking: MetalLB, which keeps the node MetalLB chose: each agent takes over on the node whose speaker announces the address now, so no address moves and no connection in flight is reset"
	}
	return "; NOTE: not every imported policy has ranking: MetalLB, so an address whose Mooring owner is another node than MetalLB's moves once when the speakers stop, and TCP connections in flight through the old node are reset (conntrack is per node)"
}

// WriteText prints the plan for an operator.
func WriteText(w io.Writer, steps []Step, f Facts) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Migration from MetalLB (namespace %s) to Mooring: %d steps; `mooring migrate metallb run` walks them and stops at the first failed check.\n", f.MetalLBNamespace, len(steps))
	if f.Interface == "" && len(f.BGPPeers) == 0 {
		b.WriteString("NOTE: no --interface: ARP/NDP responders will not be counted; run from a host on the Services' segment with --interface to check them.\n")
	}
	if f.Probe == "" {
		b.WriteString("NOTE: no --probe URL: no traffic check; give one that goes through a LoadBalancer address.\n")
	}
	for i, s := range steps {
		fmt.Fprintf(&b, "\n%d. %s\n   why: %s\n", i, s.Name, s.Why)
		for _, a := range s.Actions {
			fmt.Fprintf(&b, "   do:       %s\n", a)
		}
		for _, c := range s.Checks {
			line := string(c)
			if c == CheckResponders {
				line = fmt.Sprintf("%s (at most %d per address)", c, s.MaxResponders)
			}
			fmt.Fprintf(&b, "   check:    %s\n", line)
		}
		for _, r := range s.Rollback {
			fmt.Fprintf(&b, "   rollback: %s\n", r)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}
