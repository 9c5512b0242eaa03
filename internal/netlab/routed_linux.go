package netlab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"time"

	"github.com/vishvananda/netlink"
)

// This file puts a host behind another one, on a point-to-point link of its
// own: a client that reaches the lab only through a router, as a client of
// a routed fabric does.

// AttachBehind adds a host named name whose only link (eth0) is a veth pair
// to via, on its own subnets sub4 and sub6 (at least /24 and /120): via's
// end is named name and gets the gateway addresses (BehindGatewayOffset),
// the new host gets BehindHostOffset and default routes through via. via
// must forward (net.ipv4.ip_forward, net.ipv6.conf.all.forwarding) for the
// host to reach anything else, and the hosts beyond via need routes back to
// sub4 and sub6. sysctls are written before the veth appears.
//
// As with AttachHost, the caller must Release the new host; Lab.Close does
// not. AttachBehind returns once both ends of the link are up.
func (l *Lab) AttachBehind(ctx context.Context, name string, via *Host, sub4, sub6 netip.Prefix, sysctls map[string]string) (*Host, error) {
	switch {
	case name == "" || len(name) > 15 || l.Host(name) != nil || name == via.Name:
		return nil, fmt.Errorf("netlab: AttachBehind: name %q is empty, longer than 15 characters or taken", name)
	case !sub4.Addr().Is4() || sub4.Bits() > 24 || sub4 != sub4.Masked():
		return nil, fmt.Errorf("netlab: AttachBehind %s: subnet %s: want a masked IPv4 prefix of /24 or shorter", name, sub4)
	case !sub6.Addr().Is6() || sub6.Addr().Is4In6() || sub6.Bits() > 120 || sub6 != sub6.Masked():
		return nil, fmt.Errorf("netlab: AttachBehind %s: subnet %s: want a masked IPv6 prefix of /120 or shorter", name, sub6)
	}
	for k := range sysctls {
		if _, err := sysctlPath(k); err != nil {
			return nil, err
		}
	}
	h, err := newNamespace(name, sysctls)
	if err != nil {
		return nil, err
	}
	if err := l.linkBehind(ctx, h, via, sub4, sub6); err != nil {
		return nil, errors.Join(err, h.Release())
	}
	return h, nil
}

// linkBehind creates and addresses the veth pair between via and h, routes
// h through via and waits for both ends to be up.
func (l *Lab) linkBehind(ctx context.Context, h, via *Host, sub4, sub6 netip.Prefix) error {
	gw4, gw6 := addOffset(sub4.Addr(), BehindGatewayOffset), addOffset(sub6.Addr(), BehindGatewayOffset)
	h.Addr4, h.Addr6 = addOffset(sub4.Addr(), BehindHostOffset), addOffset(sub6.Addr(), BehindHostOffset)
	// Readable MACs as on the bridge, with 01 in the fifth byte: another
	// segment.
	h.MAC = net.HardwareAddr{0x02, 0x6d, 0x00, 0x00, 0x01, byte(BehindHostOffset)}
	veth := &netlink.Veth{
		LinkAttrs:        netlink.LinkAttrs{Name: h.Name, HardwareAddr: net.HardwareAddr{0x02, 0x6d, 0x00, 0x00, 0x01, BehindGatewayOffset}},
		PeerName:         "eth0",
		PeerHardwareAddr: h.MAC,
		PeerNamespace:    netlink.NsFd(h.w.ns),
	}
	err := via.withNL(func(nl *netlink.Handle) error {
		if err := nl.LinkAdd(veth); err != nil {
			return fmt.Errorf("creating veth pair: %w", err)
		}
		for _, p := range []netip.Prefix{netip.PrefixFrom(gw4, sub4.Bits()), netip.PrefixFrom(gw6, sub6.Bits())} {
			if err := nl.AddrAdd(veth, nlAddr(p)); err != nil {
				return fmt.Errorf("adding %s: %w", p, err)
			}
		}
		return nl.LinkSetUp(veth)
	})
	if err != nil {
		return fmt.Errorf("netlab: AttachBehind %s: in %s: %w", h.Name, via.Name, err)
	}
	eth0, err := h.nl.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("netlab: %s: finding eth0: %w", h.Name, err)
	}
	h.IfIndex = eth0.Attrs().Index
	for _, p := range []netip.Prefix{netip.PrefixFrom(h.Addr4, sub4.Bits()), netip.PrefixFrom(h.Addr6, sub6.Bits())} {
		if err := h.nl.AddrAdd(eth0, nlAddr(p)); err != nil {
			return fmt.Errorf("netlab: %s: adding %s to eth0: %w", h.Name, p, err)
		}
	}
	if err := h.nl.LinkSetUp(eth0); err != nil {
		return fmt.Errorf("netlab: %s: setting eth0 up: %w", h.Name, err)
	}
	for _, gw := range []netip.Addr{gw4, gw6} {
		r := &netlink.Route{LinkIndex: h.IfIndex, Gw: gw.AsSlice()}
		if err := h.nl.RouteReplace(r); err != nil {
			return fmt.Errorf("netlab: %s: default route via %s: %w", h.Name, gw, err)
		}
	}
	return waitOperUp(ctx, []*Host{via, h}, []string{h.Name, "eth0"})
}

// waitOperUp polls until link names[i] of hosts[i] is operationally up.
func waitOperUp(ctx context.Context, hosts []*Host, names []string) error {
	ctx, cancel := context.WithTimeout(ctx, defaultReadyTimeout)
	defer cancel()
	t := time.NewTicker(pollInterval)
	defer t.Stop()
	for {
		pending := ""
		for i, h := range hosts {
			err := h.withNL(func(nl *netlink.Handle) error {
				link, err := nl.LinkByName(names[i])
				if err == nil && link.Attrs().OperState != netlink.OperUp {
					pending = h.Name + " " + names[i]
				}
				return err
			})
			if err != nil {
				return fmt.Errorf("netlab: reading %s %s: %w", h.Name, names[i], err)
			}
		}
		if pending == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("netlab: %s not operationally up: %w", pending, ctx.Err())
		case <-t.C:
		}
	}
}
