//go:build !linux

package agent

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
)

var errUnsupported = errors.New("agent: the L2 agent needs Linux (netlink, AF_PACKET)")

type netlinkLinks struct{}

func (netlinkLinks) Interfaces() ([]announce.Interface, error) { return nil, errUnsupported }
func (netlinkLinks) Addrs() ([]announce.LocalAddr, error)      { return nil, errUnsupported }
func (netlinkLinks) Watch(context.Context, func()) error       { return errUnsupported }
func (netlinkLinks) Prefixes() (map[int][]netip.Prefix, error) { return nil, errUnsupported }

type procSysctls struct{ root string }

func (procSysctls) ArpIgnore(string) (int, error) { return 0, errUnsupported }

type rawProber struct{}

func (rawProber) Probe(context.Context, int, []netip.Addr, time.Duration) (map[netip.Addr][]net.HardwareAddr, error) {
	return nil, errUnsupported
}
