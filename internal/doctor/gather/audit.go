package gather

import (
	"context"
	"fmt"
	"math"
	"net"
	"net/netip"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/mooringlb/mooring/internal/doctor"
)

// MaxAuditAddrs bounds one audit: every address a Service holds is asked
// for, then free pool addresses up to this many in all (one ARP request or
// neighbour solicitation each, answers collected in one window).
const MaxAuditAddrs = 512

// ResponderFunc returns every MAC that answers ARP/NDP for each address,
// asked from a host on the Services' segment (arpprobe.ProbeInterface).
type ResponderFunc func(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]net.HardwareAddr, error)

// audit asks who answers for the pools' addresses (Mooring's and
// MetalLB's): the held ones first, then free ones up to MaxAuditAddrs. A
// MAC is named by the node whose InternalIP it answers for.
func audit(ctx context.Context, in *doctor.Inputs, nodes []corev1.Node, opt Options) (*doctor.Audit, error) {
	if opt.Responders == nil {
		return &doctor.Audit{Skipped: "no --interface given"}, nil
	}
	a := &doctor.Audit{Interface: opt.Interface}
	holder := map[netip.Addr]string{}
	mooring := map[netip.Addr]string{}
	var addrs []netip.Addr
	for _, s := range in.Services {
		for _, x := range s.Addrs {
			if _, ok := holder[x]; !ok {
				holder[x] = s.Key()
				addrs = append(addrs, x)
			}
			if n := s.AnnouncedBy[x]; n != "" {
				mooring[x] = n
			}
		}
	}
	var ranges []doctor.Range
	for _, p := range in.Pools {
		if !p.Disabled {
			ranges = append(ranges, p.Ranges...)
		}
	}
	for _, p := range in.Foreign.MetalLBPools {
		ranges = append(ranges, p.Ranges...)
	}
	for _, r := range ranges {
		x := r.First
		for ; x.IsValid() && x.Compare(r.Last) <= 0 && len(addrs) < MaxAuditAddrs; x = x.Next() {
			if _, held := holder[x]; !held && !slices.Contains(addrs, x) {
				addrs = append(addrs, x)
			}
		}
		if x.IsValid() && x.Compare(r.Last) <= 0 {
			a.Left = satAdd(a.Left, countFrom(x, r.Last))
		}
	}
	nodeOf := map[netip.Addr]string{}
	probe := slices.Clone(addrs)
	for _, n := range nodes {
		for _, na := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(na.Address); err == nil && na.Type == corev1.NodeInternalIP {
				nodeOf[ip.Unmap()] = n.Name
				probe = append(probe, ip.Unmap())
			}
		}
	}
	got, err := opt.Responders(ctx, probe)
	if err != nil {
		return nil, fmt.Errorf("ARP/NDP audit on %s: %w", opt.Interface, err)
	}
	macNode := map[string]string{}
	for ip, node := range nodeOf {
		for _, m := range got[ip] {
			macNode[m.String()] = node
		}
	}
	for _, x := range addrs {
		e := doctor.AuditAddr{Addr: x, Service: holder[x], Mooring: mooring[x]}
		for _, m := range got[x] {
			e.Responders = append(e.Responders, doctor.Responder{MAC: m.String(), Node: macNode[m.String()]})
		}
		a.Addrs = append(a.Addrs, e)
	}
	return a, nil
}

// countFrom is how many addresses lie in [x, last], saturated at MaxInt32
// (an IPv6 pool may hold 2^64).
func countFrom(x, last netip.Addr) int {
	a, b := x.As16(), last.As16()
	var n uint64
	for i := 0; i < 16; i++ {
		if n > math.MaxInt32 {
			return math.MaxInt32
		}
		n = n<<8 + uint64(b[i]) - uint64(a[i])
	}
	return int(min(n+1, math.MaxInt32))
}

func satAdd(a, b int) int { return int(min(int64(a)+int64(b), math.MaxInt32)) }
