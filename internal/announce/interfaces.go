package announce

import (
	"net/netip"
	"slices"
)

// OwnerInterfaces names, for every owned address in owners (Decide's
// Result.Owners for in), the interfaces its owner answers on, given each
// node's interfaces: what Decide puts in Result.Local on the owner itself.
// It lets anyone holding the API objects and each node's published
// interfaces name the announcing interface without running one decision
// per node. Cost: O(A·P) for A addresses and P policies, plus compiling.
func OwnerInterfaces(in Input, owners []Owner, ifaces map[string][]Interface) map[netip.Addr][]string {
	pols, _ := compile(in.Policies)
	labels := map[string][]map[string]string{}
	for _, n := range in.Nodes {
		labels[n.Name] = append(labels[n.Name], n.Labels)
	}
	svcs := map[ServiceKey][]*Service{}
	for i := range in.Services {
		s := &in.Services[i]
		svcs[s.Key] = append(svcs[s.Key], s)
	}
	out := map[netip.Addr][]string{}
	for _, o := range owners {
		if o.Node == "" {
			continue
		}
		selected := map[*policy]bool{}
		for _, k := range o.Services {
			for _, s := range svcs[k] {
				for _, p := range policiesByAddr(s, pols)[o.Addr] {
					if slices.ContainsFunc(labels[o.Node], p.NodeSelector.Matches) {
						selected[p] = true
					}
				}
			}
		}
		st := &addrState{localPols: selected}
		es, _ := localEntries(nil, nil, o.Addr, st, ifaces[o.Node], in.Capabilities.interfaceMatcher(o.Node))
		var names []string
		for _, e := range sortEntries(es) {
			names = append(names, e.IfName)
		}
		if names != nil {
			out[o.Addr] = names
		}
	}
	return out
}
