package migrate

import (
	"slices"
	"strings"
	"testing"
)

func TestPlanOrderAndRollback(t *testing.T) {
	f := Facts{MetalLBNamespace: "metallb-system", Speakers: []string{"speaker"}, Controllers: []string{"controller"},
		Webhooks: []string{"metallb-webhook-configuration"}, MetalLBObjects: []string{"ipaddresspools.metallb.io -n metallb-system lan"},
		Pools: []string{"lan"}, Policies: []string{"l2"}, ImportFile: "mooring.yaml", SaveDir: "saved"}
	steps := Plan(f)
	var names []string
	for _, s := range steps {
		names = append(names, s.Name)
		if len(s.Rollback) == 0 || len(s.Checks) == 0 {
			t.Errorf("step %q has no rollback or no check", s.Name)
		}
		if !slices.Contains(s.Checks, CheckAddressesUnchanged) {
			t.Errorf("step %q does not check that addresses are unchanged", s.Name)
		}
	}
	want := []string{"pre-checks", "apply Mooring pools and L2 policies while MetalLB still runs", "scale MetalLB's speakers to zero", "remove MetalLB", "let Mooring serve new Services"}
	if !slices.Equal(names, want) {
		t.Fatalf("order %q", names)
	}
	// Mooring takes over while the speakers run: two responders allowed
	// then, one after the speakers are gone.
	if steps[1].MaxResponders != 2 || steps[2].MaxResponders != 1 {
		t.Errorf("responders allowed: %d, %d", steps[1].MaxResponders, steps[2].MaxResponders)
	}
	// The speakers withdraw together before they are scaled away, and the
	// controller's --adopt-only is checked from the start until MetalLB is
	// gone; the pre-check counts responders (a stale copy answers too).
	if !strings.Contains(steps[2].Actions[0], "delete l2advertisements") || !strings.Contains(strings.Join(steps[2].Actions[1:], "\n"), "patch daemonset speaker") {
		t.Errorf("speakers step: %q", steps[2].Actions)
	}
	for i := range 4 {
		if !slices.Contains(steps[i].Checks, CheckAdoptOnly) {
			t.Errorf("step %q does not check --adopt-only", steps[i].Name)
		}
	}
	// The agents must be able to gossip beside the speakers before
	// anything changes.
	if !slices.Contains(steps[0].Checks, CheckGossipPort) {
		t.Errorf("the pre-checks do not check the gossip port: %v", steps[0].Checks)
	}
	if !slices.Contains(steps[0].Checks, CheckResponders) || steps[0].MaxResponders != 1 || !steps[0].MetalLBAnnounces || steps[2].MetalLBAnnounces {
		t.Errorf("responder checks: %+v %+v", steps[0], steps[2])
	}
	// The webhook goes before the controller and the objects.
	rm := strings.Join(steps[3].Actions, "\n")
	if strings.Index(rm, "validatingwebhookconfiguration") > strings.Index(rm, "deployment controller") ||
		strings.Index(rm, "deployment controller") > strings.Index(rm, "ipaddresspools") {
		t.Errorf("removal order:\n%s", rm)
	}
	var b strings.Builder
	if err := WriteText(&b, steps, f); err != nil || !strings.Contains(b.String(), "rollback: kubectl delete -f mooring.yaml") ||
		!strings.Contains(b.String(), "not every imported policy has ranking: MetalLB") {
		t.Errorf("text: %v\n%s", err, b.String())
	}
}

// With every imported policy ranked as MetalLB does, the plan says the
// hand-over moves nothing and allows one responder per address throughout.
func TestPlanKeepsMetalLBNodes(t *testing.T) {
	f := Facts{MetalLBNamespace: "metallb-system", Speakers: []string{"speaker"}, Pools: []string{"lan"}, Policies: []string{"l2"},
		KeepsMetalLBNodes: true, ImportFile: "mooring.yaml", SaveDir: "saved"}
	steps := Plan(f)
	for _, s := range steps {
		if slices.Contains(s.Checks, CheckResponders) && s.MaxResponders != 1 {
			t.Errorf("step %q allows %d responders, want 1", s.Name, s.MaxResponders)
		}
	}
	var b strings.Builder
	if err := WriteText(&b, steps, f); err != nil || !strings.Contains(b.String(), "ranking: MetalLB, which keeps the node MetalLB chose") ||
		!strings.Contains(b.String(), "at most 1 per address") || strings.Contains(b.String(), "at most 2") {
		t.Errorf("text: %v\n%s", err, b.String())
	}
}

// MetalLB in BGP mode is handed over node by node: the speakers pinned to
// labelled nodes first (none restarted), Mooring's objects applied with the
// peers kept off the labelled nodes, then one node per step, each checked
// handed over, and MetalLB removed once no speaker runs.
func TestPlanBGPNodeByNode(t *testing.T) {
	f := Facts{MetalLBNamespace: "metallb-system", Speakers: []string{"speaker"}, Controllers: []string{"controller"},
		Pools: []string{"lan"}, BGPPeers: []string{"tor"}, SpeakerNodes: []string{"node-1", "node-2"},
		ImportFile: "mooring.yaml", SaveDir: "saved"}
	steps := Plan(f)
	var kinds []string
	for _, s := range steps {
		kinds = append(kinds, string(s.Kind)+":"+s.Node)
		if len(s.Rollback) == 0 || len(s.Checks) == 0 {
			t.Errorf("step %q has no rollback or no check", s.Name)
		}
		if !slices.Contains(s.Checks, CheckAddressesUnchanged) || !slices.Contains(s.Checks, CheckTraffic) {
			t.Errorf("step %q does not check addresses and traffic", s.Name)
		}
		if slices.Contains(s.Checks, CheckResponders) || slices.Contains(s.Checks, CheckMooringAnnounces) {
			t.Errorf("step %q checks L2 announcements in a BGP hand-over", s.Name)
		}
	}
	if !slices.Contains(steps[0].Checks, CheckGossipPort) {
		t.Errorf("the BGP pre-checks do not check the gossip port: %v", steps[0].Checks)
	}
	want := []string{"pre-checks:", "pin-bgp-speakers:", "apply:", "hand-over-bgp-node:node-1", "hand-over-bgp-node:node-2", "remove-metallb:", "serve-new-services:"}
	if !slices.Equal(kinds, want) {
		t.Fatalf("steps %q, want %q", kinds, want)
	}
	pin := strings.Join(steps[1].Actions, "\n")
	if !strings.Contains(pin, "label node node-1 "+SpeakerLabel+"=on") || !strings.Contains(pin, `"OnDelete"`) ||
		strings.Index(pin, "label node") > strings.Index(pin, "patch daemonset") {
		t.Errorf("pin step (labels before the DaemonSet's selector, OnDelete): %s", pin)
	}
	for _, s := range steps[3:5] {
		if !slices.Contains(s.Checks, CheckBGPNodeHandedOver) || !strings.Contains(s.Actions[0], "label node "+s.Node+" "+SpeakerLabel+"-") {
			t.Errorf("hand-over step %+v", s)
		}
	}
	if !slices.Contains(steps[5].Checks, CheckSpeakersGone) || !strings.Contains(steps[5].Actions[0], "kubectl apply -f mooring.yaml") {
		t.Errorf("remove step %+v", steps[5])
	}
	var b strings.Builder
	if err := WriteText(&b, steps, f); err != nil || strings.Contains(b.String(), "--interface") {
		t.Errorf("text (no ARP note in a BGP hand-over): %v\n%s", err, b.String())
	}
}
