package failover

import (
	"context"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
)

// NeighbourTable reads the MAC for an address from the kernel's neighbour
// table: the one the client actually sends to. Handle selects the network
// namespace (netlink.NewHandleAt for the lab's client namespace; no thread
// switching needed); nil reads the calling process's namespace.
type NeighbourTable struct {
	Handle *netlink.Handle
}

// usable are the states in which the kernel sends to the entry's MAC.
const usable = netlink.NUD_REACHABLE | netlink.NUD_STALE | netlink.NUD_DELAY | netlink.NUD_PROBE |
	netlink.NUD_PERMANENT | netlink.NUD_NOARP

// Owner implements OwnerObserver.
func (n NeighbourTable) Owner(_ context.Context, addr netip.Addr) (net.HardwareAddr, error) {
	addr = addr.Unmap()
	family := netlink.FAMILY_V4
	if addr.Is6() {
		family = netlink.FAMILY_V6
	}
	var (
		list []netlink.Neigh
		err  error
	)
	if n.Handle != nil {
		list, err = n.Handle.NeighList(0, family)
	} else {
		list, err = netlink.NeighList(0, family)
	}
	if err != nil {
		return nil, fmt.Errorf("reading the neighbour table: %w", err)
	}
	ip := net.IP(addr.AsSlice())
	for _, ne := range list {
		if ne.IP.Equal(ip) && ne.State&usable != 0 && len(ne.HardwareAddr) > 0 {
			return ne.HardwareAddr, nil
		}
	}
	return nil, nil
}
