package host

import (
	"net"
	"net/netip"
)

// LinkInfo is one of the node's links, as far as choosing where to answer
// ARP/NDP goes (Links.Inspect reads it from netlink).
type LinkInfo struct {
	Name  string
	Index int
	// MAC is its hardware address (what its answers name).
	MAC net.HardwareAddr
	// Up: administratively up and not reporting a down carrier.
	Up bool
	// NoARP: the link does no neighbour resolution (IFF_NOARP): answering
	// there reaches nobody.
	NoARP    bool
	Loopback bool
	// Ethernet: an Ethernet-framed link with a 6-byte MAC (the responder
	// speaks nothing else).
	Ethernet bool
	// Enslaved: a port of a bridge or bond (it has a master): its master
	// is where the node's addresses and answers belong.
	Enslaved bool
	// Veth: one end of a veth pair, nearly always a pod's.
	Veth  bool
	Addrs []netip.Addr
	// DefaultRoute: a default route (either family) leaves through it.
	DefaultRoute bool
}
