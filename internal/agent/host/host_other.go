//go:build !linux

package host

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
)

var errUnsupported = errors.New("agent: the L2 agent needs Linux (netlink, AF_PACKET)")

type Links struct{}

func (Links) Interfaces() ([]announce.Interface, error) { return nil, errUnsupported }
func (Links) Addrs() ([]announce.LocalAddr, error)      { return nil, errUnsupported }
func (Links) Watch(context.Context, func()) error       { return errUnsupported }
func (Links) Prefixes() (map[int][]netip.Prefix, error) { return nil, errUnsupported }

type Sysctls struct{ Root string }

func (Sysctls) ArpIgnore(string) (int, error) { return 0, errUnsupported }

type Prober struct{}

func (Prober) Probe(context.Context, int, []netip.Addr, time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	return nil, errUnsupported
}
