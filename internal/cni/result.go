package cni

import (
	"net"

	"github.com/containernetworking/cni/pkg/types"
	current "github.com/containernetworking/cni/pkg/types/100"

	"github.com/mooringlb/mooring/internal/ipamd"
)

// result turns an allocation into a CNI result: one IP per family with the
// block's gateway, and a default route per family unless routes are set.
func result(c *Config, al ipamd.Allocation) *current.Result {
	r := &current.Result{CNIVersion: current.ImplementedSpecVersion}
	gws := map[bool]net.IP{}
	for _, ip := range al.IPs {
		addr := net.IP(ip.Address.Addr().AsSlice())
		gw := net.IP(ip.Gateway.AsSlice())
		r.IPs = append(r.IPs, &current.IPConfig{Address: *ipNet(addr, ip.Address.Bits()), Gateway: gw})
		gws[ip.Address.Addr().Is4()] = gw
	}
	routes := c.IPAM.Routes
	if len(routes) == 0 {
		for _, v4 := range []bool{true, false} {
			if _, ok := gws[v4]; !ok {
				continue
			}
			dst := net.IPNet{IP: net.IPv6zero, Mask: net.CIDRMask(0, 128)}
			if v4 {
				dst = net.IPNet{IP: net.IPv4zero.To4(), Mask: net.CIDRMask(0, 32)}
			}
			routes = append(routes, &types.Route{Dst: dst})
		}
	}
	for _, rt := range routes {
		gw, ok := gws[rt.Dst.IP.To4() != nil]
		if !ok {
			continue // a route of a family the pod has no address of
		}
		out := *rt
		if out.GW == nil {
			out.GW = gw
		}
		r.Routes = append(r.Routes, &out)
	}
	return r
}
