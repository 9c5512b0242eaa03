//go:build linux

package host

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/vishvananda/netlink"

	"github.com/mooringlb/mooring/internal/announce"
)

// Links reads the interfaces and addresses of the namespace the
// process runs in (the agent runs with hostNetwork: the node's).
type Links struct{}

func (Links) Interfaces() ([]announce.Interface, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	out := make([]announce.Interface, 0, len(links))
	for _, l := range links {
		a := l.Attrs()
		out = append(out, announce.Interface{Name: a.Name, Index: a.Index, Loopback: a.Flags&net.FlagLoopback != 0})
	}
	return out, nil
}

func (Links) Addrs() ([]announce.LocalAddr, error) {
	links, err := netlink.LinkList()
	if err != nil {
		return nil, fmt.Errorf("listing links: %w", err)
	}
	var out []announce.LocalAddr
	for _, l := range links {
		addrs, err := netlink.AddrList(l, netlink.FAMILY_ALL)
		if err != nil {
			return nil, fmt.Errorf("listing addresses of %s: %w", l.Attrs().Name, err)
		}
		for _, a := range addrs {
			if ip, ok := netip.AddrFromSlice(a.IP); ok {
				out = append(out, announce.LocalAddr{Addr: ip.Unmap(), IfIndex: l.Attrs().Index, IfName: l.Attrs().Name})
			}
		}
	}
	return out, nil
}

func (Links) Prefixes() (map[int][]netip.Prefix, error) {
	addrs, err := netlink.AddrList(nil, netlink.FAMILY_ALL)
	if err != nil {
		return nil, fmt.Errorf("listing addresses: %w", err)
	}
	out := map[int][]netip.Prefix{}
	for _, a := range addrs {
		if a.IPNet == nil {
			continue
		}
		ip, ok := netip.AddrFromSlice(a.IP)
		ones, bits := a.Mask.Size()
		if !ok || bits == 0 {
			continue
		}
		if ip.Is4In6() && bits == 32 {
			ip = ip.Unmap() // a 16-byte IPv4 address with a 4-byte mask
		}
		out[a.LinkIndex] = append(out[a.LinkIndex], netip.PrefixFrom(ip, ones))
	}
	return out, nil
}

// Watch subscribes to link and address changes. A lost subscription (the
// kernel drops messages under pressure) is reported, and the caller's
// periodic checks cover the gap.
func (Links) Watch(ctx context.Context, changed func()) error {
	done := make(chan struct{})
	defer close(done)
	errc := make(chan error, 2)
	onErr := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	links := make(chan netlink.LinkUpdate, 64)
	if err := netlink.LinkSubscribeWithOptions(links, done, netlink.LinkSubscribeOptions{ErrorCallback: onErr}); err != nil {
		return fmt.Errorf("subscribing to link changes: %w", err)
	}
	addrs := make(chan netlink.AddrUpdate, 64)
	if err := netlink.AddrSubscribeWithOptions(addrs, done, netlink.AddrSubscribeOptions{ErrorCallback: onErr}); err != nil {
		return fmt.Errorf("subscribing to address changes: %w", err)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-errc:
			return fmt.Errorf("netlink subscription: %w", err)
		case _, ok := <-links:
			if !ok {
				return errors.New("netlink link subscription closed")
			}
			changed()
		case _, ok := <-addrs:
			if !ok {
				return errors.New("netlink address subscription closed")
			}
			changed()
		}
	}
}

// Sysctls reads /proc/sys, which shows the namespace of the reading
// thread: the agent's whole process lives in the node's namespace.
type Sysctls struct{ Root string }

func (p Sysctls) ArpIgnore(iface string) (int, error) {
	if iface == "" || strings.ContainsAny(iface, "/") || iface == "." || iface == ".." {
		return 0, fmt.Errorf("invalid interface name %q", iface)
	}
	b, err := os.ReadFile(filepath.Join(p.Root, "net", "ipv4", "conf", iface, "arp_ignore"))
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil // no IPv4 on it (or gone): the kernel default
	}
	if err != nil {
		return 0, fmt.Errorf("reading arp_ignore of %s: %w", iface, err)
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("arp_ignore of %s: %w", iface, err)
	}
	return v, nil
}
