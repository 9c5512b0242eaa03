package doctor

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
)

// checkForeign: another load-balancer implementation runs, found by what
// runs (its Pods) and whom it announces (its own records), not by a
// DaemonSet's status, which nobody may update.
func checkForeign(in Inputs) []Finding {
	f := in.Foreign
	announced := map[netip.Addr]Service{}
	for _, s := range in.Services {
		for a := range s.AnnouncedBy {
			announced[a] = s
		}
	}
	var out []Finding
	if len(f.MetalLBSpeakers)+len(f.MetalLBControllers) > 0 {
		out = append(out, metallbFinding(f, announced))
	} else if len(f.MetalLBIdle) > 0 {
		out = append(out, Finding{Severity: Info, Object: f.MetalLBIdle[0].Kind + "/" + f.MetalLBIdle[0].Namespace + "/" + f.MetalLBIdle[0].Name,
			Message: fmt.Sprintf("MetalLB's workloads exist but none of their Pods runs (%s)", workloads(f.MetalLBIdle)),
			Fix:     "mooring migrate metallb plan lists what MetalLB left behind, with the command that removes each"})
	}
	if len(f.CiliumL2Policies) > 0 || len(f.CiliumLeases) > 0 {
		out = append(out, ciliumFinding(f, announced))
	}
	if len(f.CiliumStaleLeases) > 0 {
		out = append(out, Finding{Severity: Info, Object: "Lease/" + f.CiliumStaleLeases[0].Namespace + "/" + f.CiliumStaleLeases[0].Name,
			Message: fmt.Sprintf("Cilium L2 leases nobody renews: %s", workloads(f.CiliumStaleLeases)),
			Fix:     "delete them once Cilium's L2 announcements are off: kubectl -n NAMESPACE delete lease NAME"})
	}
	if len(f.KubeVIP) > 0 {
		out = append(out, Finding{Severity: Problem, Object: f.KubeVIP[0].Kind + "/" + f.KubeVIP[0].Namespace + "/" + f.KubeVIP[0].Name,
			Message: fmt.Sprintf("kube-vip is running (%s): it may answer ARP for Service addresses too", workloads(f.KubeVIP)),
			Fix:     "disable kube-vip's Service load balancing (svc_enable=false) or restrict Mooring to other Services"})
	}
	if len(f.ServiceLB) > 0 {
		var svcs []string
		for _, w := range f.ServiceLB {
			if w.Service != "" && !slices.Contains(svcs, w.Service) {
				svcs = append(svcs, w.Service)
			}
		}
		slices.Sort(svcs)
		out = append(out, Finding{Severity: Problem, Object: "Pod/" + f.ServiceLB[0].Namespace + "/" + f.ServiceLB[0].Name,
			Message: fmt.Sprintf("k3s servicelb (klipper-lb) is running %d svclb pod(s) for Services %s: it serves them on the nodes' own addresses beside Mooring", len(f.ServiceLB), strings.Join(svcs, ", ")),
			Fix:     "start k3s with --disable=servicelb"})
	}
	return out
}

// metallbFinding lists MetalLB's running Pods, the Services its speakers
// announce now (ServiceL2Status) and the addresses Mooring announces too.
func metallbFinding(f Foreign, announced map[netip.Addr]Service) Finding {
	var parts []string
	if len(f.MetalLBSpeakers) > 0 {
		parts = append(parts, fmt.Sprintf("%d speaker(s) (%s)", len(f.MetalLBSpeakers), workloads(f.MetalLBSpeakers)))
	}
	if len(f.MetalLBControllers) > 0 {
		parts = append(parts, fmt.Sprintf("controller (%s)", workloads(f.MetalLBControllers)))
	}
	msg := "MetalLB runs: " + strings.Join(parts, "; ")
	var serving []string
	for _, svc := range slices.Sorted(maps.Keys(f.MetalLBAnnouncers)) {
		node := f.MetalLBAnnouncers[svc]
		if slices.ContainsFunc(f.MetalLBSpeakers, func(w Workload) bool { return w.Node == node }) {
			serving = append(serving, svc+" from "+node)
		}
	}
	if len(serving) > 0 {
		msg += fmt.Sprintf("; its speakers announce %d Service(s) now (ServiceL2Status): %s", len(serving), strings.Join(serving, ", "))
	}
	var both []string
	for a, s := range announced {
		for _, p := range f.MetalLBPools {
			if slices.ContainsFunc(p.Ranges, func(r Range) bool { return r.Contains(a) }) {
				both = append(both, fmt.Sprintf("%s (%s, MetalLB pool %s)", a, s.Key(), p.Name))
			}
		}
	}
	slices.Sort(both)
	if len(both) > 0 {
		msg += "; addresses both MetalLB and Mooring announce: " + strings.Join(both, ", ")
	}
	first := append(slices.Clone(f.MetalLBSpeakers), f.MetalLBControllers...)[0]
	return Finding{Severity: Problem, Object: first.Kind + "/" + first.Namespace + "/" + first.Name, Message: msg,
		Fix: "finish the migration (mooring migrate metallb plan): scale the speakers to zero once Mooring announces every address, then remove MetalLB"}
}

// ciliumFinding lists Cilium's L2 policies and the fresh leases whose
// holders answer ARP.
func ciliumFinding(f Foreign, announced map[netip.Addr]Service) Finding {
	var leases, both []string
	for _, l := range f.CiliumLeases {
		leases = append(leases, fmt.Sprintf("%s held by %s", l.Service, l.Node))
		for a, s := range announced {
			if s.Key() == l.Service {
				both = append(both, fmt.Sprintf("%s (%s)", a, l.Service))
			}
		}
	}
	slices.Sort(both)
	msg := fmt.Sprintf("Cilium L2 announcements are active (policies: %s; leases: %d", orNone(f.CiliumL2Policies), len(f.CiliumLeases))
	if len(leases) > 0 {
		msg += ": " + strings.Join(leases, ", ")
	}
	msg += ")"
	if len(both) > 0 {
		msg += "; addresses both Cilium and Mooring announce: " + strings.Join(both, ", ")
	}
	return Finding{Severity: Problem, Object: "CiliumL2AnnouncementPolicy", Message: msg,
		Fix: "delete the CiliumL2AnnouncementPolicies (and set l2announcements.enabled=false) once Mooring announces the addresses"}
}

func orNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}

func workloads(ws []Workload) string {
	var out []string
	for _, w := range ws {
		s := w.Kind + " " + w.Namespace + "/" + w.Name
		if w.Node != "" && w.Kind == "Pod" {
			s += " on " + w.Node
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}

// checkAudit: the ARP/NDP audit, live. A MAC that answers for a pool
// address without being the Mooring announcer of that address is foreign:
// another implementation's announcer (MetalLB's speaker, with its
// ServiceL2Status naming the node), a stale local copy, a second
// announcer. An address Mooring announces that nobody answers is down now.
func checkAudit(in Inputs) []Finding {
	a := in.Audit
	switch {
	case a == nil:
		return nil
	case a.Skipped != "":
		return []Finding{{Severity: Info, Message: "no ARP/NDP audit of the pools' addresses: " + a.Skipped,
			Fix: "run doctor from a host on the Services' segment with --interface IFACE (needs CAP_NET_RAW)"}}
	}
	type foreignMAC struct {
		r     Responder
		addrs []AuditAddr
	}
	byMAC := map[string]*foreignMAC{}
	var out []Finding
	for _, x := range a.Addrs {
		for _, r := range x.Responders {
			if x.Mooring != "" && r.Node == x.Mooring {
				continue
			}
			if byMAC[r.MAC] == nil {
				byMAC[r.MAC] = &foreignMAC{r: r}
			}
			byMAC[r.MAC].addrs = append(byMAC[r.MAC].addrs, x)
		}
		if x.Mooring != "" && len(x.Responders) == 0 {
			out = append(out, Finding{Severity: Problem, Node: x.Mooring, Object: serviceObject(x.Service), Address: x.Addr.String(),
				Message: fmt.Sprintf("nobody answers ARP/NDP for %s (%s), which Mooring's agent on %s announces", x.Addr, orFree(x.Service), x.Mooring),
				Fix:     "look at the agent on " + x.Mooring + ": its /readyz, the agent-dataplane finding, its log"})
		}
	}
	for _, mac := range slices.Sorted(maps.Keys(byMAC)) {
		out = append(out, foreignMACFinding(in, a, byMAC[mac].r, byMAC[mac].addrs))
	}
	if a.Left > 0 {
		out = append(out, Finding{Severity: Info, Message: fmt.Sprintf("the ARP/NDP audit asked for %d addresses and left %d pool addresses out (its bound)", len(a.Addrs), a.Left),
			Fix: "audit a pool's every address with mooring audit arp -i IFACE ADDRESS..."})
	}
	return out
}

// foreignMACFinding: one MAC that answers for addresses it does not
// announce for Mooring, with who it is, as far as the cluster tells.
func foreignMACFinding(in Inputs, a *Audit, r Responder, xs []AuditAddr) Finding {
	who := "a host that is no node"
	if r.Node != "" {
		who = "node " + r.Node
	}
	var addrs, metallb []string
	for _, x := range xs {
		s := x.Addr.String() + " (" + orFree(x.Service)
		if x.Mooring != "" {
			s += ", Mooring announces it from " + x.Mooring
		}
		addrs = append(addrs, s+")")
		if r.Node != "" && x.Service != "" && in.Foreign.MetalLBAnnouncers[x.Service] == r.Node {
			metallb = append(metallb, x.Service)
		}
	}
	msg := fmt.Sprintf("foreign MAC %s (%s) answers ARP/NDP on %s for %d address(es) no Mooring agent announces from it: %s",
		r.MAC, who, a.Interface, len(xs), strings.Join(addrs, ", "))
	if len(metallb) > 0 {
		msg += fmt.Sprintf("; MetalLB's speaker on %s announces %d of them (ServiceL2Status)", r.Node, len(metallb))
	}
	fix := "stop the other announcer (finish the MetalLB migration), or remove the stale local copy from that machine's interfaces (a leftover kube-ipvs0?) or set net.ipv4.conf.all.arp_ignore=1 there"
	return Finding{Severity: Problem, Node: r.Node, Object: "MAC/" + r.MAC, Message: msg, Fix: fix}
}

func serviceObject(svc string) string {
	if svc == "" {
		return ""
	}
	return "Service/" + svc
}

func orFree(svc string) string {
	if svc == "" {
		return "no Service holds it"
	}
	return svc
}
