package audit

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/lab"
)

// NodeMACs names the machines behind MACs, so the audit can print
// "02:6d:00:00:00:0b (node-1)" instead of a bare MAC an operator must
// chase across nodes.
type NodeMACs interface {
	// NodeMACs returns a name per MAC (keyed by net.HardwareAddr.String())
	// for every MAC it can name.
	NodeMACs(ctx context.Context) (map[string]string, error)
}

// LabMACs reads a running lab's state (`mooring lab up` records every
// namespace's eth0 MAC): exact, and free of traffic.
type LabMACs struct{ Dir string }

// NodeMACs implements NodeMACs; it returns lab.ErrNoLab when no lab runs
// in Dir.
func (l LabMACs) NodeMACs(context.Context) (map[string]string, error) {
	h, err := lab.Open(l.Dir)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, hs := range h.State.Hosts {
		if m, err := net.ParseMAC(hs.MAC); err == nil {
			out[m.String()] = hs.Name
		}
	}
	return out, nil
}

// Prober asks who answers for addrs, like ProbeOne.
type Prober func(ctx context.Context, addrs []netip.Addr) (arpprobe.Result, error)

// APIMACs lists the cluster's Nodes and asks the segment who answers for
// each Node's InternalIP: the MAC that answers for a Node's address is
// that Node's on this segment. Addresses of the probing interface itself
// map to its own MAC (a machine does not answer its own requests).
type APIMACs struct {
	Client kubernetes.Interface
	Probe  Prober
	// Local are the probing interface's addresses and MAC.
	Local    []netip.Addr
	LocalMAC net.HardwareAddr
}

// NodeMACs implements NodeMACs.
func (a APIMACs) NodeMACs(ctx context.Context) (map[string]string, error) {
	nodes, err := a.Client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes: %w", err)
	}
	byAddr := map[netip.Addr]string{}
	for _, n := range nodes.Items {
		for _, na := range n.Status.Addresses {
			if na.Type != corev1.NodeInternalIP {
				continue
			}
			if ip, err := netip.ParseAddr(na.Address); err == nil {
				byAddr[ip.Unmap()] = n.Name
			}
		}
	}
	out := map[string]string{}
	var ask []netip.Addr
	for ip, name := range byAddr {
		if isLocal(ip, a.Local) {
			if a.LocalMAC != nil {
				out[a.LocalMAC.String()] = name
			}
			continue
		}
		ask = append(ask, ip)
	}
	if len(ask) == 0 {
		return out, nil
	}
	got, err := a.Probe(ctx, ask)
	if err != nil {
		return out, fmt.Errorf("probing the Nodes' addresses: %w", err)
	}
	for _, ip := range ask {
		for _, m := range got.MACs(ip) {
			out[m.String()] = byAddr[ip]
		}
	}
	return out, nil
}

func isLocal(ip netip.Addr, local []netip.Addr) bool {
	for _, l := range local {
		if l == ip {
			return true
		}
	}
	return false
}

// nameMACs asks each source in turn and keeps the first name of each
// MAC; it stops once every wanted MAC has a name. Sources that are not
// there (no lab running) are skipped quietly; other failures are returned
// joined, with whatever names were found.
func nameMACs(ctx context.Context, want []net.HardwareAddr, sources ...NodeMACs) (map[string]string, error) {
	names := map[string]string{}
	var errs []error
	for _, s := range sources {
		if allNamed(want, names) {
			break
		}
		got, err := s.NodeMACs(ctx)
		for m, n := range got {
			if _, ok := names[m]; !ok {
				names[m] = n
			}
		}
		if err != nil && !errors.Is(err, lab.ErrNoLab) {
			errs = append(errs, err)
		}
	}
	return names, errors.Join(errs...)
}

func allNamed(want []net.HardwareAddr, names map[string]string) bool {
	for _, m := range want {
		if _, ok := names[m.String()]; !ok {
			return false
		}
	}
	return true
}
