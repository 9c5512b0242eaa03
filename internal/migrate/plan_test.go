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
	if err := WriteText(&b, steps, f); err != nil || !strings.Contains(b.String(), "rollback: kubectl delete -f mooring.yaml") {
		t.Errorf("text: %v\n%s", err, b.String())
	}
}
