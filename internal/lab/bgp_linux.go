package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"

	"github.com/mooringlb/mooring/internal/frr"
	"github.com/mooringlb/mooring/internal/netlab"
)

// bgpLab is what the BGP lab adds to a Cluster (see bgp.go).
type bgpLab struct {
	router *netlab.Host  // on the segment at RouterOffset
	client *netlab.Host  // behind the router
	frr    *frr.Instance // the router's daemons
}

// buildBGP adds the router and the client behind it (the netlab lab was
// built without a client) and starts FRR. Its folder is a temporary one
// of its own, not under the state dir: FRR's daemons run as user frr,
// who may not enter the root-only state dir.
func (c *Cluster) buildBGP(ctx context.Context) error {
	if !c.cfg.BGP.Enabled {
		return nil
	}
	b := &bgpLab{}
	c.bgp = b
	var err error
	if b.router, err = c.net.AttachHost(ctx, RouterHost, RouterOffset, routerSysctls); err != nil {
		return err
	}
	if b.client, err = c.net.AttachBehind(ctx, netlab.ClientName, b.router, ClientSubnet4, ClientSubnet6, nil); err != nil {
		return err
	}
	var nodes []netip.Addr
	for _, h := range c.net.Nodes() {
		nodes = append(nodes, h.Addr4)
	}
	if b.frr, err = frr.Start(ctx, b.router, "", routerConfig(c.net.Config(), b.router.Addr4, nodes, c.cfg.bgpBFD(), c.cfg.bgpPassword())); err != nil {
		return fmt.Errorf("lab: starting the router: %w", err)
	}
	c.progress("router up (FRR in namespace " + RouterHost + "), client behind it")
	return nil
}

// bgpHost returns the BGP lab's host called name, or nil.
func (c *Cluster) bgpHost(name string) *netlab.Host {
	switch {
	case c.bgp == nil:
		return nil
	case name == RouterHost:
		return c.bgp.router
	case name == netlab.ClientName:
		return c.bgp.client
	}
	return nil
}

// clientHost is the client: on the segment, or behind the router.
func (c *Cluster) clientHost() *netlab.Host {
	if h := c.bgpHost(netlab.ClientName); h != nil {
		return h
	}
	return c.net.Client()
}

// Router is the BGP lab's router (its vtysh client), nil in the L2 lab.
func (c *Cluster) Router() *frr.Client {
	if c.bgp == nil || c.bgp.frr == nil {
		return nil
	}
	return &c.bgp.frr.Client
}

// publishBGPHosts adds the router to the state (the client is published
// as in the L2 lab).
func (c *Cluster) publishBGPHosts(add func(*netlab.Host, string) error) error {
	if c.bgp == nil {
		return nil
	}
	if err := add(c.bgp.router, roleRouter); err != nil {
		return err
	}
	c.state.Hosts[len(c.state.Hosts)-1].VtySocket = c.bgp.frr.Dir
	return nil
}

// bgpRoutes adds a node's routes back to the client's subnets.
func (c *Cluster) bgpRoutes(routes []*netlink.Route) []*netlink.Route {
	if c.bgp == nil {
		return routes
	}
	for p, gw := range bgpNodeRoutes(c.net.Config()) {
		routes = append(routes, &netlink.Route{Dst: ipNet(p), Gw: gw.AsSlice()})
	}
	return routes
}

// bgpNodeRoutes are the routes every node gets back to the client's
// subnets, through the router.
func bgpNodeRoutes(net netlab.Config) map[netip.Prefix]netip.Addr {
	return map[netip.Prefix]netip.Addr{
		ClientSubnet4: nthHost(net.Subnet4, RouterOffset),
		ClientSubnet6: nthHost(net.Subnet6, RouterOffset),
	}
}

// stopBGP stops the router's daemons (before the lab kills strays in its
// namespaces); releaseBGP drops the two namespaces afterwards.
func (c *Cluster) stopBGP() error {
	if c.bgp == nil || c.bgp.frr == nil {
		return nil
	}
	return c.bgp.frr.Stop()
}

func (c *Cluster) releaseBGP() error {
	if c.bgp == nil {
		return nil
	}
	var errs []error
	for _, h := range []*netlab.Host{c.bgp.client, c.bgp.router} {
		if h != nil {
			errs = append(errs, h.Release())
		}
	}
	return errors.Join(errs...)
}

// bgpHosts are the BGP lab's namespaces, for sweeping stray processes.
func (c *Cluster) bgpHosts() []*netlab.Host {
	if c.bgp == nil {
		return nil
	}
	var out []*netlab.Host
	for _, h := range []*netlab.Host{c.bgp.router, c.bgp.client} {
		if h != nil {
			out = append(out, h)
		}
	}
	return out
}

// bgpSettleUptime: with BFD, a node's session that has been up this long
// without the reset below counts as settled.
const bgpSettleUptime = 5 * time.Second

// bgpSettled reports whether the router has every node's session
// Established and, with BFD, up bgpSettleUptime (or up again after a
// drop). It waited out the reset that FRR's re-keyed BFD session caused
// with GoBGP 4.8's BFD one to three seconds after a session's first
// establishment (a lab declared ready before that lost one node's next
// hop for ~3 s right after; docs/benchmarks.md, session 21); the agents'
// own BFD has no such reset since session 23 (docs/bgp.md, "BFD against
// FRR"), and the wait stays as a guard against any early reset.
func (c *Cluster) bgpSettled(ctx context.Context, stage *string) bool {
	if c.bgp == nil || c.bgp.frr == nil {
		return true
	}
	*stage = "every node's BGP session at the router Established"
	if c.cfg.bgpBFD() {
		*stage += fmt.Sprintf(" (with BFD: past its first reset, or up %v)", bgpSettleUptime)
	}
	ss, err := c.bgp.frr.Client.Sessions(ctx)
	if err != nil {
		return false
	}
	for _, n := range c.net.Nodes() {
		s, ok := ss[n.Addr4]
		if !ok || s.State != "Established" {
			return false
		}
		if c.cfg.bgpBFD() && s.ConnectionsDropped == 0 && s.Uptime < bgpSettleUptime {
			return false
		}
	}
	return true
}
