package failover

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	fo "github.com/mooringlb/mooring/internal/failover"
	"github.com/mooringlb/mooring/internal/lab"
)

// routerNetNSFromLab returns the namespace path of the BGP lab's router
// when the lab running with stateDir is this cluster (its nodes are the
// cluster's Nodes) and has a router; "" otherwise.
func routerNetNSFromLab(ctx context.Context, client kubernetes.Interface, stateDir string) string {
	h, err := lab.Open(stateDir)
	if err != nil {
		return ""
	}
	if _, err := h.Host(lab.RouterHost); err != nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil || len(labNodeMACs(h.State, nodes.Items)) == 0 {
		return ""
	}
	p, err := h.NetNSPath(lab.RouterHost)
	if err != nil {
		return ""
	}
	return p
}

// nodeAddrs names every Node's InternalIP addresses: what a router's next
// hops are.
func nodeAddrs(ctx context.Context, client kubernetes.Interface) (fo.NodeAddrs, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("listing Nodes (their addresses name the router's next hops): %w", err)
	}
	out := fo.NodeAddrs{}
	for _, n := range nodes.Items {
		for _, a := range n.Status.Addresses {
			if ip, err := netip.ParseAddr(a.Address); err == nil && a.Type == "InternalIP" {
				out[ip.Unmap()] = n.Name
			}
		}
	}
	return out, nil
}
