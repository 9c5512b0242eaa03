package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// routePods gives every node its routes (see routeNode).
func (c *Cluster) routePods() error {
	for _, n := range c.nodes {
		if err := c.routeNode(n); err != nil {
			return err
		}
	}
	return nil
}

// routeNode gives node n a route to every other node's pod CIDRs via that
// node's eth0 address (the job a CNI's route agent does; with pod IPAM the
// nodes have no static pod CIDRs and the agents route), and one for the
// Service CIDRs: a node sends to a ClusterIP only if it has a route for it,
// because kube-proxy rewrites the destination after that lookup. Real nodes
// use their default route; lab nodes have none. Idempotent.
func (c *Cluster) routeNode(n nodeSpec) error {
	h := c.net.Host(n.Name)
	nl, err := h.NetlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	var routes []*netlink.Route
	for _, o := range c.nodes {
		if o.Name == n.Name {
			continue
		}
		for i, p := range o.PodCIDRs {
			routes = append(routes, &netlink.Route{Dst: ipNet(p), Gw: o.Addrs[i].AsSlice()})
		}
	}
	for _, p := range []netip.Prefix{ServiceCIDR4, ServiceCIDR6} {
		routes = append(routes, &netlink.Route{Dst: ipNet(p), LinkIndex: h.IfIndex, Scope: netlink.SCOPE_LINK})
	}
	routes = c.bgpRoutes(routes)
	for _, r := range routes {
		if err := nl.RouteReplace(r); err != nil {
			return fmt.Errorf("lab: %s: route to %s: %w", n.Name, r.Dst, err)
		}
	}
	return nil
}

// Kill hard-kills a node: eth0 down, then SIGKILL to every process group
// the lab started there (the kubelet's holds its pods), then to every
// other process living in the node's network namespace (whoever started
// it). Nothing graceful: the link goes first, as when a machine loses
// power, so the kernel's FIN or RST for the killed processes' connections
// (a BGP session, a gossip stream) never reaches a peer.
func (c *Cluster) Kill(node string) error {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	h := c.net.Host(n.Name)
	ns, err := nsOfFD(int(h.NS()))
	if err != nil {
		return fmt.Errorf("lab: %s: reading its namespace: %w", node, err)
	}
	errs := []error{h.SetLinkDown("eth0")}
	c.mu.Lock()
	for _, p := range c.procs {
		if p.comp.Host == n.Name {
			p.killed = true
			errs = append(errs, p.p.Kill())
		}
	}
	c.killed[node] = true
	if stop := c.traces[node]; stop != nil {
		stop() // the reboot being followed ends here
	}
	c.mu.Unlock()
	others, err := killNetNS(ns, 5*time.Second)
	errs = append(errs, err, c.killRealNode(node), h.SetLinkDown("eth0"))
	c.log.Info("node killed", "node", node, "other processes", others)
	return errors.Join(errs...)
}

// RecordRestart remembers a command that Restore runs again in node's
// namespace (`lab exec --restart-on-restore`): the first instance is the
// user's, the ones Restore starts are the lab's (logged under logs/,
// killed with the node and on the way out).
func (c *Cluster) RecordRestart(r Restart) error {
	if _, err := c.node(r.Node); err != nil {
		return err
	}
	if len(r.Argv) == 0 || !filepath.IsAbs(r.Argv[0]) {
		return fmt.Errorf("lab: a command to restart needs an absolute path, got %q", r.Argv)
	}
	c.mu.Lock()
	defer c.mu.Unlock() // one writer of state.json at a time
	c.state.Restarts = append(c.state.Restarts, r)
	c.log.Info("command recorded for restore", "node", r.Node, "argv", r.Argv)
	return writeState(c.paths.State, &c.state)
}

// restarts are the components that Restore starts for node's recorded
// commands.
func (c *Cluster) restarts(node string) []component {
	c.mu.Lock()
	defer c.mu.Unlock()
	var comps []component
	for i, r := range c.state.Restarts {
		if r.Node == node {
			comps = append(comps, component{Name: fmt.Sprintf("user-%d/%s", i+1, node), Host: node,
				Path: r.Argv[0], Args: r.Argv[1:], Dir: r.Dir})
		}
	}
	return comps
}

// Restore brings a killed node back, as a rebooted machine would come
// back: eth0 up with its addresses and routes (setting a link down drops
// its IPv6 address and routes), then the kubelet stand-in (which restarts
// the node's pods), kube-proxy and the agent. The Node turns Ready again
// at its first heartbeat. Commands recorded with RecordRestart run again
// last. A real node reboots instead of the stand-in (bootRealNode), and the
// lab logs its way back until every pod on it is Ready (traceReboot).
func (c *Cluster) Restore(node string) error {
	n, err := c.node(node)
	if err != nil {
		return err
	}
	c.mu.Lock()
	killed := c.killed[node]
	c.mu.Unlock()
	if !killed {
		return fmt.Errorf("lab: %s is not killed", node)
	}
	start := time.Now()
	h := c.net.Host(node)
	if err := h.SetLinkUp("eth0"); err != nil {
		return err
	}
	if err := h.AddAddr("eth0", netip.PrefixFrom(h.Addr6, c.net.Config().Subnet6.Bits())); err != nil && !errors.Is(err, unix.EEXIST) {
		return err
	}
	if err := c.waitLinkUp(h.Name); err != nil {
		return err
	}
	if err := c.routeNode(n); err != nil {
		return err
	}
	link := time.Since(start)
	comps := []component{kubeletComponent(&c.cfg, c.paths, n), kubeProxyComponent(&c.cfg, c.paths, n)}
	if c.cfg.realNodes() {
		// A reboot: containerd, the kubelet, then the pods it restarts.
		ctx, cancel := context.WithTimeout(c.life, time.Minute)
		err := c.bootRealNode(ctx, node, false, nil)
		cancel()
		if err != nil {
			return err
		}
		comps = comps[1:]
	}
	if c.cfg.mooringProcesses() {
		comps = append(comps, agentComponent(&c.cfg, c.paths, n))
	}
	comps = append(comps, c.restarts(node)...)
	for _, comp := range comps {
		if err := c.startComponent(comp); err != nil {
			return err
		}
	}
	c.mu.Lock()
	c.killed[node] = false
	if c.cfg.realNodes() {
		ctx, cancel := context.WithCancel(c.life)
		c.traces[node] = cancel
		c.wg.Go(func() {
			defer cancel()
			c.traceReboot(ctx, node, start)
		})
	}
	c.mu.Unlock()
	c.log.Info("node restored", "node", node, "link and routes", link.Round(time.Millisecond),
		"took", time.Since(start).Round(time.Millisecond))
	return nil
}

// node returns the plan of the named node.
func (c *Cluster) node(name string) (nodeSpec, error) {
	for _, n := range c.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nodeSpec{}, fmt.Errorf("lab: no node %q (nodes are node-1..node-%d)", name, len(c.nodes))
}

// waitLinkUp polls until the host's eth0 is operationally up (frames sent
// earlier are dropped: LAB-NOTES' readiness race), for at most 5 s.
func (c *Cluster) waitLinkUp(host string) error {
	h := c.net.Host(host)
	nl, err := h.NetlinkHandle()
	if err != nil {
		return err
	}
	defer nl.Close()
	for range 500 {
		l, err := nl.LinkByIndex(h.IfIndex)
		if err != nil {
			return err
		}
		if l.Attrs().OperState == netlink.OperUp {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("lab: %s eth0 not up after 5s", host)
}
