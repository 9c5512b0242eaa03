package status

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/controller"
	"github.com/mooringlb/mooring/internal/foreignlb"
)

// Others is what status knows beyond Mooring's own objects, so that during
// a migration it says who serves each address now: how Mooring's
// controller runs (the mode its leader publishes on its Lease; adopt-only
// leaves Services without a class to another controller) and what other
// implementations run and announce (internal/foreignlb: MetalLB's speakers
// and ServiceL2Statuses, Cilium's leases).
type Others struct {
	Known bool
	// Controller is how the leading Mooring controller runs; LeaseName is
	// where that was read (namespace/name).
	Controller controller.Mode
	LeaseName  string
	Foreign    foreignlb.Snapshot
}

// OthersFromAPI reads Others: the controller's Lease ns/name and the other
// implementations, cluster-wide.
func OthersFromAPI(cs kubernetes.Interface, dc dynamic.Interface, ns, name string) func(context.Context, time.Time) (Others, error) {
	return func(ctx context.Context, now time.Time) (Others, error) {
		m, err := controller.ReadMode(ctx, cs.CoordinationV1(), ns, name, now)
		if err != nil {
			return Others{}, err
		}
		f, err := foreignlb.Read(ctx, cs, dc, now)
		if err != nil {
			return Others{}, err
		}
		return Others{Known: true, Controller: m, LeaseName: ns + "/" + name, Foreign: f}, nil
	}
}

// serving is who else announces the Service now.
func (o Others) serving(svc string) []foreignlb.Announcer {
	if !o.Known {
		return nil
	}
	return o.Foreign.Serving(svc)
}

// adoptOnly says whether a live leading controller runs --adopt-only.
func (o Others) adoptOnly() bool {
	c := o.Controller
	return o.Known && c.Alive && c.Published && c.AdoptOnly
}

// foreignAnnouncements are the other implementations' announcers of every
// address of the Service.
func foreignAnnouncements(addrs []string, served []foreignlb.Announcer) []Announcement {
	var out []Announcement
	for _, s := range addrs {
		a, err := netip.ParseAddr(s)
		if err != nil {
			continue
		}
		for _, f := range served {
			out = append(out, Announcement{Address: a.Unmap().String(), By: f.By(), Node: f.Node, Interfaces: f.Interfaces,
				Implementation: f.Implementation, Source: f.Source})
		}
	}
	return out
}

// withoutServed drops Mooring's "not announced" reasons when another
// implementation announces the Service now: the address is served, and
// Mooring not announcing it is the migration's state, not a fault. The
// agents' own problems (an address they own but cannot announce) stay.
func withoutServed(ps []Problem, served []foreignlb.Announcer) []Problem {
	if len(served) == 0 {
		return ps
	}
	return slices.DeleteFunc(ps, func(p Problem) bool {
		return p.Current && p.Node == "" && (p.Reason == ReasonNotAnnounced || p.Reason == mooringv1.ProblemNoEligibleNode)
	})
}

// unassigned is MESSAGE for a Service Mooring serves (by class) whose
// controller wrote no AddressAssigned condition: who gave it its
// addresses and serves it, and why Mooring's controller wrote nothing.
func (o Others) unassigned(s *corev1.Service, served []foreignlb.Announcer) string {
	key := s.Namespace + "/" + s.Name
	var who []string
	for _, f := range served {
		who = append(who, fmt.Sprintf("%s (%s, announced from %s)", f.Implementation, f.Source, f.By()))
	}
	pool := ""
	if o.Known {
		if p := o.Foreign.MetalLB.Allocated[key]; p != "" {
			pool = "its address is from MetalLB's pool " + p
		}
	}
	adopt := "the Mooring controller runs --adopt-only (Lease " + o.LeaseName + "): it records this Service's addresses and writes nothing to it"
	switch {
	case len(who) > 0 && o.adoptOnly():
		return join("served by "+strings.Join(who, " and "), pool, adopt)
	case len(who) > 0:
		return join("served by "+strings.Join(who, " and "), pool,
			"the Mooring controller wrote no AddressAssigned condition (is it running? with --default-class=false it serves only loadBalancerClass "+mooringv1.LoadBalancerClass+")")
	case o.adoptOnly() && pool != "":
		return join(pool+", and MetalLB's speakers announce it no more", adopt, "the migration's last step restarts it without --adopt-only")
	case o.adoptOnly():
		return adopt + ", and no other controller serves it (no MetalLB speaker, no Cilium lease announces it): restart the controller without --adopt-only (mooring migrate metallb plan, last step)"
	}
	return "no AddressAssigned condition: the controller has not seen this Service " +
		"(is `mooring controller` running? with --default-class=false it serves only loadBalancerClass " + mooringv1.LoadBalancerClass + ")"
}

func join(parts ...string) string {
	return strings.Join(slices.DeleteFunc(parts, func(s string) bool { return s == "" }), "; ")
}

// Notes are the lines status prints under the Services' table: which other
// implementations run and how Mooring's controller runs, when that matters.
func (o Others) Notes() []string {
	if !o.Known {
		return nil
	}
	var out []string
	m := o.Foreign.MetalLB
	if len(m.Speakers)+len(m.Controllers) > 0 {
		var nodes []string
		for _, w := range m.Speakers {
			nodes = append(nodes, w.Node)
		}
		slices.Sort(nodes)
		n := 0
		for svc, st := range m.Announcers {
			if len(o.Foreign.Serving(svc)) > 0 && st.Node != "" {
				n++
			}
		}
		out = append(out, fmt.Sprintf("MetalLB runs: %d speaker Pod(s) (on %s), %d controller Pod(s); its speakers announce %d Service(s) now (ServiceL2Status).",
			len(m.Speakers), orDash(strings.Join(nodes, ", ")), len(m.Controllers), n))
	}
	fresh := 0
	for _, l := range o.Foreign.Cilium.Leases {
		if l.Fresh {
			fresh++
		}
	}
	if fresh > 0 || len(o.Foreign.Cilium.Policies) > 0 {
		out = append(out, fmt.Sprintf("Cilium announces: %d CiliumL2AnnouncementPolicy(ies), %d fresh per-Service lease(s).", len(o.Foreign.Cilium.Policies), fresh))
	}
	if o.adoptOnly() {
		out = append(out, "The Mooring controller runs --adopt-only (Lease "+o.LeaseName+"): Services without a loadBalancerClass keep what another controller gave them; Mooring writes nothing to them.")
	}
	return out
}
