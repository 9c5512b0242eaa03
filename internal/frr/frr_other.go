//go:build !linux

package frr

import (
	"context"
	"net/netip"

	"github.com/mooringlb/mooring/internal/netlab"
)

// Instance is a running router (Linux only).
type Instance struct{}

// Check reports ErrUnsupported.
func Check() error { return ErrUnsupported }

// Start reports ErrUnsupported.
func Start(context.Context, *netlab.Host, string, Config) (*Instance, error) {
	return nil, ErrUnsupported
}

// The methods mirror the Linux API; every one reports ErrUnsupported.

func (*Instance) Dir() string                                        { return "" }
func (*Instance) Vtysh(context.Context, ...string) ([]byte, error)   { return nil, ErrUnsupported }
func (*Instance) Configure(context.Context, ...string) error         { return ErrUnsupported }
func (*Instance) RIB(context.Context, Family) (RIB, error)           { return nil, ErrUnsupported }
func (*Instance) BGPTable(context.Context, Family) (BGPTable, error) { return nil, ErrUnsupported }
func (*Instance) BGPPrefix(context.Context, netip.Prefix) ([]Path, error) {
	return nil, ErrUnsupported
}
func (*Instance) Sessions(context.Context) (map[netip.Addr]Session, error) {
	return nil, ErrUnsupported
}
func (*Instance) BFDPeers(context.Context) ([]BFDPeer, error) { return nil, ErrUnsupported }
func (*Instance) LogTail(string, int) string                  { return "" }
func (*Instance) Stop() error                                 { return nil }
func (*Instance) Kill() error                                 { return ErrUnsupported }
