package gather

import (
	"context"
	"slices"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/doctor"
	"github.com/mooringlb/mooring/internal/foreignlb"
)

// foreign reads the other implementations (internal/foreignlb) into
// doctor's terms.
func foreign(ctx context.Context, cs kubernetes.Interface, dc dynamic.Interface, now time.Time) (doctor.Foreign, foreignlb.Snapshot, error) {
	s, err := foreignlb.Read(ctx, cs, dc, now)
	if err != nil {
		return doctor.Foreign{}, s, err
	}
	return Foreign(s), s, nil
}

// Foreign converts a foreignlb snapshot.
func Foreign(s foreignlb.Snapshot) doctor.Foreign {
	m := s.MetalLB
	f := doctor.Foreign{
		MetalLBSpeakers:    workloads(m.Speakers),
		MetalLBControllers: workloads(m.Controllers),
		MetalLBAnnouncers:  map[string]string{},
		CiliumL2Policies:   s.Cilium.Policies,
		KubeVIP:            workloads(s.KubeVIP),
		ServiceLB:          workloads(s.ServiceLB),
	}
	if len(m.Speakers)+len(m.Controllers) == 0 {
		f.MetalLBIdle = workloads(append(append([]foreignlb.Workload(nil), m.SpeakerSets...), m.ControllerSets...))
	}
	for _, p := range m.Pools {
		dp := doctor.Pool{Name: p.Name}
		for _, r := range p.Ranges {
			dp.Ranges = append(dp.Ranges, doctor.Range{First: r.First, Last: r.Last})
		}
		f.MetalLBPools = append(f.MetalLBPools, dp)
	}
	for svc, st := range m.Announcers {
		f.MetalLBAnnouncers[svc] = st.Node
	}
	for svc, l := range s.Cilium.Leases {
		w := doctor.Workload{Kind: "Lease", Namespace: l.Namespace, Name: l.Name, Node: l.Holder, Service: svc}
		if l.Fresh {
			f.CiliumLeases = append(f.CiliumLeases, w)
		} else {
			f.CiliumStaleLeases = append(f.CiliumStaleLeases, w)
		}
	}
	for _, l := range s.Cilium.Unmatched {
		f.CiliumStaleLeases = append(f.CiliumStaleLeases, doctor.Workload{Kind: "Lease", Namespace: l.Namespace, Name: l.Name, Node: l.Holder})
	}
	byName := func(a, b doctor.Workload) int { return strings.Compare(a.Namespace+"/"+a.Name, b.Namespace+"/"+b.Name) }
	slices.SortFunc(f.CiliumLeases, byName)
	slices.SortFunc(f.CiliumStaleLeases, byName)
	return f
}

func workloads(ws []foreignlb.Workload) []doctor.Workload {
	var out []doctor.Workload
	for _, w := range ws {
		out = append(out, doctor.Workload{Kind: w.Kind, Namespace: w.Namespace, Name: w.Name, Node: w.Node, Service: w.Service})
	}
	return out
}
