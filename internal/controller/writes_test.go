package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// ownResources are the resources the controller writes; leases are left
// out because leader election renews its Lease every RetryPeriod by design.
var ownResources = []string{"services", "services/status", "events", "loadbalancerippools", "loadbalancerippools/status"}

func ownWrites(w map[string]float64) (float64, map[string]float64) {
	total, parts := 0.0, map[string]float64{}
	for _, r := range ownResources {
		if w[r] != 0 {
			total += w[r]
			parts[r] = w[r]
		}
	}
	return total, parts
}

// TestWrites: a converged cluster costs no writes at all, and converging
// one new Service costs its status patch and one Event (plus, amortised
// over every allocation in PoolStatusInterval, one pool status write).
func TestWrites(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	mkNamespace(t, c, "w", nil)
	create(t, c, nsPool("w", "", "100.68.0.0/24"))
	for i := range 20 {
		create(t, c, lbService("w", fmt.Sprintf("s%02d", i)))
	}
	startController(t, env.Config)
	eventually(t, 30*time.Second, func() string {
		if n := len(assignedIn(t, c, "w")); n < 20 {
			return fmt.Sprintf("%d of 20 assigned", n)
		}
		return ""
	})
	time.Sleep(2 * time.Second) // pool status flush and event sink settle

	before := apiWrites(t, env.Config)
	time.Sleep(5 * time.Second)
	steady, parts := ownWrites(diff(apiWrites(t, env.Config), before))
	t.Logf("steady state, 5 s: %v writes %v (all: %v)", steady, parts, diff(apiWrites(t, env.Config), before))
	if steady != 0 {
		t.Errorf("steady state wrote %v times: %v", steady, parts)
	}

	before = apiWrites(t, env.Config)
	create(t, c, lbService("w", "new"))
	waitIPs(t, c, "w", "new", "100.68.0.21")
	time.Sleep(2 * time.Second)
	_, parts = ownWrites(diff(apiWrites(t, env.Config), before))
	t.Logf("one new Service: %v", parts)
	// One status patch carries ingress and condition; a first assignment
	// emits no Event (only transitions out of pending and warnings do).
	if parts["services"] != 1 || parts["services/status"] != 1 {
		t.Errorf("converging one new Service: want exactly 1 status patch, got %v", parts)
	}
	// The Event count is cluster-wide: an Event about something else that
	// the broadcaster flushed late under load (e.g. leader election's) is
	// not the new Service's, and neither is one the API server's own
	// ClusterIP repair loop reports about it (ClusterIPNotAllocated, when
	// it runs between the Service's allocation and its creation). None of
	// Mooring's may be about it; any other is logged.
	if parts["events"] != 0 {
		var evs corev1.EventList
		if err := c.List(context.Background(), &evs); err != nil {
			t.Fatal(err)
		}
		for _, e := range evs.Items {
			mooring := e.ReportingController == EventReporter || e.Source.Component == EventReporter
			if mooring && e.InvolvedObject.Namespace == "w" && e.InvolvedObject.Name == "new" {
				t.Errorf("a first assignment emitted an Event: %s %s: %s", e.Type, e.Reason, e.Message)
			} else {
				t.Logf("other Event (%s %s/%s, from %q/%q): %s %s", e.InvolvedObject.Kind, e.InvolvedObject.Namespace, e.InvolvedObject.Name,
					e.ReportingController, e.Source.Component, e.Reason, e.Message)
			}
		}
	}
	if parts["loadbalancerippools/status"] > 1 {
		t.Errorf("one allocation caused %v pool status writes: %v", parts["loadbalancerippools/status"], parts)
	}
}
