//go:build !linux

package failover

import (
	"context"
	"errors"
	"net"
	"net/netip"

	"github.com/vishvananda/netns"
)

// NeighbourTable reads the kernel neighbour table; only on Linux.
type NeighbourTable struct{}

// Owner implements OwnerObserver; it always fails off Linux.
func (NeighbourTable) Owner(context.Context, netip.Addr) (net.HardwareAddr, error) {
	return nil, errors.New("reading the neighbour table needs Linux")
}

// NamespaceDialer needs Linux; elsewhere its dials fail.
func NamespaceDialer(netns.NsHandle) DialFunc {
	return func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("dialing from a network namespace needs Linux")
	}
}

// NetNSClient is a client in another network namespace; only on Linux.
type NetNSClient struct {
	Dial  DialFunc
	Owner NeighbourTable
}

// OpenNetNSClient fails off Linux.
func OpenNetNSClient(string) (*NetNSClient, error) {
	return nil, errors.New("network namespaces need Linux")
}

// Close does nothing.
func (*NetNSClient) Close() error { return nil }

// KernelRoutes reads a router's routes; only on Linux.
type KernelRoutes struct{}

// OpenKernelRoutes fails off Linux.
func OpenKernelRoutes(string) (*KernelRoutes, error) {
	return nil, errors.New("network namespaces need Linux")
}

// Close does nothing.
func (*KernelRoutes) Close() error { return nil }

// Nexthops fails off Linux.
func (*KernelRoutes) Nexthops(context.Context, netip.Addr) ([]netip.Addr, error) {
	return nil, errors.New("reading routes needs Linux")
}
