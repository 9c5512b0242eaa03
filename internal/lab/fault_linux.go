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

	"github.com/mooringlb/mooring/internal/netlab"
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
// with the lab, taking the rules and settings with them). It returns the
// node it affects.
func (c *Cluster) StartFault(ctx context.Context, f Fault) (string, error) {
	if err := f.Validate(&c.cfg); err != nil {
		return "", err
	}
	switch f.Kind {
	case FaultSlowNewPods:
		return c.startSlowNewPods(ctx, f)
	case FaultResponderOpen:
		return c.startResponderOpen(ctx, f)
	}
	return "", nil
}

// Down takes the lab down, as `mooring lab down` does: Run returns once
// everything is removed.
func (c *Cluster) Down() { c.down() }

// startResponderOpen lowers the node's net.core.optmem_max below what the
// responder's socket filter needs and restarts the node's agent: its
// process comes up and stays up, decides, and fails to open its ARP/NDP
// sockets every retry (`setsockopt: cannot allocate memory`). Everything
// else in the node's namespace keeps working: kube-proxy, the kubelet
// stand-in, the pods and the agent's gossip and API connections attach no
// socket filter.
func (c *Cluster) startResponderOpen(ctx context.Context, f Fault) (string, error) {
	node := f.Node
	if node == "" {
		var err error
		if node, err = c.demoAnnouncer(ctx); err != nil {
			return "", err
		}
	}
	h := c.host(node)
	if h == nil {
		return "", fmt.Errorf("lab: --fault: no node %q", node)
	}
	if err := h.Sysctl("net.core.optmem_max", faultOptmemMax); err != nil {
		return "", fmt.Errorf("lab: fault on %s: %w", node, err)
	}
	if err := c.StopAgent(node); err != nil {
		return "", fmt.Errorf("lab: fault on %s: restarting its agent: %w", node, err)
	}
	if err := c.StartAgent(node); err != nil {
		return "", fmt.Errorf("lab: fault on %s: restarting its agent: %w", node, err)
	}
	c.log.Warn("fault injected: the agent cannot open its ARP/NDP sockets (net.core.optmem_max="+faultOptmemMax+") and retries while it runs", "node", node)
	return node, nil
}

// demoAnnouncer is the node whose MAC answers ARP, from the client, for
// the demo Service's first LoadBalancer address.
func (c *Cluster) demoAnnouncer(ctx context.Context) (string, error) {
	svc, err := c.cs.CoreV1().Services(DemoNamespace).Get(ctx, DemoService, metav1.GetOptions{})
	if err != nil {
		return "", fmt.Errorf("lab: --fault: finding the node that announces the demo Service: %w", err)
	}
	for _, in := range svc.Status.LoadBalancer.Ingress {
		a, err := netip.ParseAddr(in.IP)
		if err != nil {
			continue
		}
		macs, err := netlab.Probe(ctx, c.host(netlab.ClientName), a.Unmap(), 500*time.Millisecond)
		if err != nil || len(macs) != 1 {
			return "", fmt.Errorf("lab: --fault: %s is answered by %v (%v): name the node, e.g. %s@node-2", a, macs, err, FaultResponderOpen)
		}
		for _, n := range c.nodes {
			if h := c.host(n.Name); h != nil && h.MAC.String() == macs[0].String() {
				return n.Name, nil
			}
		}
	}
	return "", fmt.Errorf("lab: --fault: no node answers for the demo Service's address: name the node, e.g. %s@node-2", FaultResponderOpen)
}

// startSlowNewPods: see FaultSlowNewPods.
func (c *Cluster) startSlowNewPods(ctx context.Context, f Fault) (string, error) {
	var n *nodeSpec
	for i := range c.nodes {
		if f.Node == "" || c.nodes[i].Name == f.Node {
			n = &c.nodes[i]
		}
	}
	if n == nil {
		return "", fmt.Errorf("lab: --fault: no node %q", f.Node)
	}
	nl, err := c.host(n.Name).NetlinkHandle()
	if err != nil {
		return "", err
	}
	// Pods running now are mature: list them before the blackout starts.
	pods, err := c.cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + n.Name})
	if err != nil {
		nl.Close()
		return "", err
	}
	sp := &slowPods{c: c, node: n.Name, nl: nl, seen: map[netip.Addr]bool{}}
	for _, p := range pods.Items {
		for _, a := range faultPodIPs(&p) {
			sp.seen[a] = true
			sp.mature(a)
		}
	}
	if err := sp.blackout(n.PodCIDRs); err != nil {
		nl.Close()
		return "", err
	}
	c.log.Warn("fault injected: new pods are unreachable from other nodes after start", "node", n.Name, "for", f.SlowNewPods)
	if err := sp.watch(ctx, f.SlowNewPods); err != nil {
		nl.Close()
		return "", err
	}
	return n.Name, nil
}

// slowPods is one node's slow-new-pods fault.
type slowPods struct {
	c    *Cluster
	node string
	nl   *netlink.Handle
	mu   sync.Mutex
	seen map[netip.Addr]bool
}

// mature lets traffic from eth0 reach pod address a.
func (sp *slowPods) mature(a netip.Addr) {
	r := netlink.NewRule()
	r.Priority, r.Table, r.IifName, r.Dst = faultPrioMature, unix.RT_TABLE_MAIN, "eth0", faultHostNet(a)
	r.Family = faultFamily(a)
	if err := sp.nl.RuleAdd(r); err != nil {
		sp.c.log.Warn("fault: un-blocking a pod failed", "node", sp.node, "ip", a, "err", err)
		return
	}
	sp.c.log.Info("fault: pod reachable now", "node", sp.node, "ip", a)
}

// blackout sends traffic from eth0 to the node's pod CIDRs to a table
// holding only a blackhole.
func (sp *slowPods) blackout(cidrs []netip.Prefix) error {
	for _, cidr := range cidrs {
		rt := &netlink.Route{Table: faultTable, Dst: faultIPNet(cidr), Type: unix.RTN_BLACKHOLE, Family: faultFamily(cidr.Addr())}
		if err := sp.nl.RouteReplace(rt); err != nil {
			return fmt.Errorf("lab: fault on %s: blackhole route %s: %w", sp.node, cidr, err)
		}
		r := netlink.NewRule()
		r.Priority, r.Table, r.IifName, r.Dst, r.Family = faultPrioBlackout, faultTable, "eth0", faultIPNet(cidr), faultFamily(cidr.Addr())
		if err := sp.nl.RuleAdd(r); err != nil {
			return fmt.Errorf("lab: fault on %s: rule for %s: %w", sp.node, cidr, err)
		}
	}
	return nil
}

// watch matures every new pod address `after` it was first seen, until
// ctx ends; then it closes the netlink handle.
func (sp *slowPods) watch(ctx context.Context, after time.Duration) error {
	factory := informers.NewSharedInformerFactoryWithOptions(sp.c.cs, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = "spec.nodeName=" + sp.node
	}))
	inf := factory.Core().V1().Pods().Informer()
	onPod := func(obj any) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return
		}
		for _, a := range faultPodIPs(p) {
			sp.mu.Lock()
			first := !sp.seen[a]
			sp.seen[a] = true
			sp.mu.Unlock()
			if first {
				time.AfterFunc(after, func() {
					if ctx.Err() == nil {
						sp.mature(a)
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
		sp.nl.Close()
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
