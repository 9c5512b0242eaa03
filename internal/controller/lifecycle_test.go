package controller

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/lbipam"
)

// TestPoolDeletedKeepsAddress: a held address whose pool disappears stays,
// with a warning condition, a Warning Event and the metric.
func TestPoolDeletedKeepsAddress(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	mkNamespace(t, c, "del", map[string]string{"t": "del"})
	pool := nsPool("del", "del", "100.64.10.0/24")
	create(t, c, pool)
	run := startController(t, env.Config)
	create(t, c, lbService("del", "keeper"))
	waitIPs(t, c, "del", "keeper", "100.64.10.1")
	if err := c.Delete(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	waitCondition(t, c, "del", "keeper", mooringv1.ConditionAddressOutsidePools, string(lbipam.ReasonHeldOutsidePools))
	ev := waitEvent(t, env.Clientset, "del", "keeper", string(lbipam.ReasonHeldOutsidePools))
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event type %s, want Warning", ev.Type)
	}
	waitIPs(t, c, "del", "keeper", "100.64.10.1")
	eventually(t, 10*time.Second, func() string {
		if v := gauge(t, run.reg, "mooring_lbipam_services_held_outside_pools"); v != 1 {
			return fmt.Sprintf("held-outside gauge %v, want 1", v)
		}
		return ""
	})
	// A new pool covering it again clears the warning; the address stays.
	create(t, c, nsPool("del2", "del", "100.64.10.0/24"))
	eventually(t, 20*time.Second, func() string {
		if cond := meta.FindStatusCondition(getSvc(t, c, "del", "keeper").Status.Conditions, mooringv1.ConditionAddressOutsidePools); cond != nil {
			return "warning condition still present: " + cond.Message
		}
		return ""
	})
	waitIPs(t, c, "del", "keeper", "100.64.10.1")
}

// TestRestartDuringBurst stops the controller in the middle of a burst of
// Service creations and starts a new one: no written address changes, no
// address is held twice.
func TestRestartDuringBurst(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	mkNamespace(t, c, "burst", nil)
	create(t, c, nsPool("burst", "", "100.65.0.0/16"))
	const n = 400
	run := startController(t, env.Config)
	var created atomic.Int32
	var wg sync.WaitGroup
	errs := make(chan error, n)
	names := make(chan int, n)
	for i := range n {
		names <- i
	}
	close(names)
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range names {
				if err := c.Create(context.Background(), lbService("burst", fmt.Sprintf("s%03d", i))); err != nil {
					errs <- err
				}
				created.Add(1)
			}
		}()
	}
	eventually(t, 60*time.Second, func() string {
		if created.Load() >= n/3 && len(assignedIn(t, c, "burst")) >= n/4 {
			return ""
		}
		return fmt.Sprintf("created %d, assigned %d", created.Load(), len(assignedIn(t, c, "burst")))
	})
	run.stop()
	before := assignedIn(t, c, "burst")
	t.Logf("stopped with %d created, %d assigned", created.Load(), len(before))
	startController(t, env.Config)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() string {
		if got := len(assignedIn(t, c, "burst")); got < n {
			return fmt.Sprintf("%d of %d assigned", got, n)
		}
		return ""
	})
	after := assignedIn(t, c, "burst")
	for name, ip := range before {
		if after[name] != ip {
			t.Errorf("%s changed from %s to %s across the restart", name, ip, after[name])
		}
	}
	holders := map[string]string{}
	for name, ip := range after {
		if other, dup := holders[ip]; dup {
			t.Errorf("%s held by %s and %s", ip, other, name)
		}
		holders[ip] = name
	}
}

// assignedIn maps Service name to its single ingress IP.
func assignedIn(t testing.TB, c client.Client, ns string) map[string]string {
	t.Helper()
	var list corev1.ServiceList
	if err := c.List(context.Background(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, s := range list.Items {
		if ips := ingressIPs(&s); len(ips) > 0 {
			if len(ips) > 1 {
				t.Errorf("%s has %v", s.Name, ips)
			}
			out[s.Name] = ips[0]
		}
	}
	return out
}

// TestAdoptForeignAssignments: addresses another controller (MetalLB)
// wrote into Services' status before Mooring started are adopted as they
// are and never handed to anyone else; Services of another class are
// reserved but never written.
func TestAdoptForeignAssignments(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	mkNamespace(t, c, "mig", nil)
	create(t, c, nsPool("mig", "", "100.66.0.0/24"))
	// .1 would be Mooring's first choice; MetalLB handed it out.
	legacy := lbService("mig", "legacy")
	create(t, c, legacy)
	setIngress(t, c, legacy, "100.66.0.1")
	other := lbService("mig", "other-class", func(s *corev1.Service) { s.Spec.LoadBalancerClass = ptr.To("metallb.io/metallb") })
	create(t, c, other)
	setIngress(t, c, other, "100.66.0.2")
	outside := lbService("mig", "outside")
	create(t, c, outside)
	setIngress(t, c, outside, "192.0.2.99")

	run := startController(t, env.Config)
	create(t, c, lbService("mig", "fresh"))
	waitIPs(t, c, "mig", "fresh", "100.66.0.3")
	// Two class-less Services held addresses Mooring did not write: the
	// log points at --adopt-only in case their controller still runs.
	if logs := run.logs.String(); !strings.Contains(logs, "--adopt-only") || !strings.Contains(logs, "services=2") {
		t.Errorf("no --adopt-only hint for 2 foreign-written Services in the log:\n%s", logs)
	}
	waitCondition(t, c, "mig", "legacy", mooringv1.ConditionAddressAssigned, ReasonAddressAssigned)
	waitIPs(t, c, "mig", "legacy", "100.66.0.1")
	waitCondition(t, c, "mig", "outside", mooringv1.ConditionAddressOutsidePools, string(lbipam.ReasonHeldOutsidePools))
	waitIPs(t, c, "mig", "outside", "192.0.2.99")
	if s := getSvc(t, c, "mig", "other-class"); len(s.Status.Conditions) != 0 {
		t.Errorf("Service of another class got conditions: %+v", s.Status.Conditions)
	}
}

func setIngress(t testing.TB, c client.Client, s *corev1.Service, ips ...string) {
	t.Helper()
	for _, ip := range ips {
		s.Status.LoadBalancer.Ingress = append(s.Status.LoadBalancer.Ingress, corev1.LoadBalancerIngress{IP: ip})
	}
	if err := c.Status().Update(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// TestTwoReplicas: with two controllers running, only the Lease holder
// allocates; when it stops, the other takes over and serves new Services.
func TestTwoReplicas(t *testing.T) {
	env := startEnv(t)
	c := env.Client
	mkNamespace(t, c, "ha", nil)
	create(t, c, nsPool("ha", "", "100.69.0.0/24"))
	first := startController(t, env.Config)
	create(t, c, lbService("ha", "a"))
	waitIPs(t, c, "ha", "a", "100.69.0.1") // first is leading
	second := startController(t, env.Config)
	create(t, c, lbService("ha", "b"))
	waitIPs(t, c, "ha", "b", "100.69.0.2")
	if v := gauge(t, second.reg, "mooring_lbipam_allocations_total"); v != 0 {
		t.Errorf("the standby replica allocated %v addresses", v)
	}
	first.stop()
	create(t, c, lbService("ha", "c"))
	waitIPs(t, c, "ha", "c", "100.69.0.3")
	waitIPs(t, c, "ha", "a", "100.69.0.1")
	if v := gauge(t, second.reg, "mooring_lbipam_allocations_total"); v != 1 {
		t.Errorf("the new leader allocated %v addresses, want 1", v)
	}
}
