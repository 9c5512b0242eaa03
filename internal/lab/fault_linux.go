package lab

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
)

// The slow-new-pods fault lives in the node's routing policy, so it needs
// no firewall binary and never touches the kubelet: traffic that ARRIVES on
// eth0 for the node's pod CIDRs is looked up in a table holding only a
// blackhole, except for pods that have "matured" (a rule per pod address,
// added SlowNewPods after the pod was first seen). Locally generated
// traffic (the kubelet's readiness check) arrives on no interface, so new
// pods still turn Ready. Replies from a new pod to another node are not
// blocked, but that node's answers to it are, so both directions fail.
const (
	faultTable        = 213
	faultPrioMature   = 100
	faultPrioBlackout = 101
)

// StartFault installs f and keeps it until ctx ends (the namespaces die
// with the lab, taking the rules with them).
func (c *Cluster) StartFault(ctx context.Context, f Fault) error {
	if f.SlowNewPods <= 0 {
		return nil
	}
	var n *nodeSpec
	for i := range c.nodes {
		if f.Node == "" || c.nodes[i].Name == f.Node {
			n = &c.nodes[i]
		}
	}
	if n == nil {
		return fmt.Errorf("lab: --fault: no node %q", f.Node)
	}
	h := c.host(n.Name)
	nl, err := h.NetlinkHandle()
	if err != nil {
		return err
	}
	// Pods running now are mature: list them before the blackout starts.
	pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		return err
	}
	var mu sync.Mutex
	seen := map[netip.Addr]bool{}
	mature := func(a netip.Addr) {
		r := netlink.NewRule()
		r.Priority, r.Table, r.IifName, r.Dst = faultPrioMature, unix.RT_TABLE_MAIN, "eth0", faultHostNet(a)
		r.Family = faultFamily(a)
		if err := nl.RuleAdd(r); err != nil {
			c.log.Warn("fault: un-blocking a pod failed", "node", n.Name, "ip", a, "err", err)
			return
		}
		c.log.Info("fault: pod reachable now", "node", n.Name, "ip", a)
	}
	for _, p := range pods.Items {
		for _, a := range faultPodIPs(&p) {
			seen[a] = true
			mature(a)
		}
	}
	for _, cidr := range n.PodCIDRs {
		rt := &netlink.Route{Table: faultTable, Dst: faultIPNet(cidr), Type: unix.RTN_BLACKHOLE, Family: faultFamily(cidr.Addr())}
		if err := nl.RouteReplace(rt); err != nil {
			return fmt.Errorf("lab: fault on %s: blackhole route %s: %w", n.Name, cidr, err)
		}
		r := netlink.NewRule()
		r.Priority, r.Table, r.IifName, r.Dst, r.Family = faultPrioBlackout, faultTable, "eth0", faultIPNet(cidr), faultFamily(cidr.Addr())
		if err := nl.RuleAdd(r); err != nil {
			return fmt.Errorf("lab: fault on %s: rule for %s: %w", n.Name, cidr, err)
		}
	}
	c.log.Warn("fault injected: new pods are unreachable from other nodes after start", "node", n.Name, "for", f.SlowNewPods)
	factory := informers.NewSharedInformerFactoryWithOptions(c.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + n.Name
	}))
	inf := factory.Core().V1().Pods().Informer()
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		for _, a := range faultPodIPs(p) {
			mu.Lock()
			first := !seen[a]
			seen[a] = true
			mu.Unlock()
			if first {
				time.AfterFunc(f.SlowNewPods, func() {
					if ctx.Err() == nil {
						mature(a)
					}
				})
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: onPod, UpdateFunc: func(_, o any) { onPod(o) }}); err != nil {
		return err
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		factory.Shutdown()
		nl.Close()
	}()
	return nil
}

func faultPodIPs(p *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	for _, ip := range p.Status.PodIPs {
		if a, err := netip.ParseAddr(ip.IP); err == nil {
			out = append(out, a.Unmap())
		}
	}
	return out
}

func faultFamily(a netip.Addr) int {
	if a.Is4() {
		return netlink.FAMILY_V4
	}
	return netlink.FAMILY_V6
}

func faultHostNet(a netip.Addr) *net.IPNet {
	return faultIPNet(netip.PrefixFrom(a, a.BitLen()))
}

func faultIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: p.Masked().Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}
