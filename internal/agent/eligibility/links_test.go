package eligibility

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/mooringlb/mooring/internal/agent/host"
)

func TestUsableLinks(t *testing.T) {
	nodeIP := netip.MustParseAddr("192.168.1.10")
	up := func(name string, addrs ...string) host.LinkInfo {
		l := host.LinkInfo{Name: name, Up: true, Ethernet: true}
		for _, a := range addrs {
			l.Addrs = append(l.Addrs, netip.MustParseAddr(a))
		}
		return l
	}
	with := func(l host.LinkInfo, f func(*host.LinkInfo)) host.LinkInfo { f(&l); return l }
	tests := []struct {
		name         string
		links        []host.LinkInfo
		usable, defs []string
		unusable     map[string]string
		nodeIPs      []netip.Addr
	}{{
		name: "the InternalIP's link is the default; pod veths, bridge ports, down, NOARP and non-Ethernet links are left out",
		links: []host.LinkInfo{
			{Name: "lo", Loopback: true, Up: true},
			with(up("eth0"), func(l *host.LinkInfo) { l.Enslaved = true }),
			up("br0", "192.168.1.10"),
			up("eth1", "10.0.0.5"),
			with(up("eth2"), func(l *host.LinkInfo) { l.Up = false }),
			with(up("flannel.1"), func(l *host.LinkInfo) { l.NoARP = true }),
			with(up("wg0"), func(l *host.LinkInfo) { l.Ethernet = false }),
			with(up("vethab12"), func(l *host.LinkInfo) { l.Veth = true }),
			with(up("eth3"), func(l *host.LinkInfo) { l.DefaultRoute = true }),
		},
		nodeIPs: []netip.Addr{nodeIP},
		usable:  []string{"br0", "eth1", "eth3"}, defs: []string{"br0"},
		unusable: map[string]string{"lo": whyLoopback, "eth0": whyEnslaved, "eth2": whyDown, "flannel.1": whyNoARP,
			"wg0": whyNotEther, "vethab12": whyVeth},
	}, {
		name:   "no InternalIP known: the default route's link",
		links:  []host.LinkInfo{up("eth0"), with(up("eth1"), func(l *host.LinkInfo) { l.DefaultRoute = true })},
		usable: []string{"eth0", "eth1"}, defs: []string{"eth1"}, unusable: map[string]string{},
	}, {
		name:    "a veth carrying the node's address (a node in a container or namespace) is usable",
		links:   []host.LinkInfo{with(up("eth0", "192.168.1.10"), func(l *host.LinkInfo) { l.Veth = true })},
		nodeIPs: []netip.Addr{nodeIP},
		usable:  []string{"eth0"}, defs: []string{"eth0"}, unusable: map[string]string{},
	}, {
		name:     "nothing usable",
		links:    []host.LinkInfo{{Name: "lo", Loopback: true, Up: true}},
		unusable: map[string]string{"lo": whyLoopback},
	}}
	for _, tt := range tests {
		usable, defs, unusable := usableLinks(tt.links, tt.nodeIPs)
		if !slices.Equal(usable, tt.usable) || !slices.Equal(defs, tt.defs) || len(unusable) != len(tt.unusable) {
			t.Errorf("%s:\n usable %v defaults %v unusable %v\n want %v %v %v", tt.name, usable, defs, unusable, tt.usable, tt.defs, tt.unusable)
			continue
		}
		for k, v := range tt.unusable {
			if unusable[k] != v {
				t.Errorf("%s: %s left out as %q, want %q", tt.name, k, unusable[k], v)
			}
		}
	}
}

func TestNetworkPrefixes(t *testing.T) {
	var in []netip.Prefix
	for _, s := range []string{
		"192.168.1.10/24", "192.168.1.11/24", // one network, listed once
		"2001:db8:1::5/64", "fe80::1c/64", // link-local left out
		"169.254.3.4/16", "10.0.0.7/8",
		"::ffff:172.16.5.5/112", // a 16-byte IPv4 address: 172.16.5.5/16
		"198.51.100.9/32",
	} {
		in = append(in, netip.MustParsePrefix(s))
	}
	got := NetworkPrefixes(in)
	want := []string{"10.0.0.0/8", "172.16.0.0/16", "192.168.1.0/24", "198.51.100.9/32", "2001:db8:1::/64"}
	if !slices.Equal(got, want) {
		t.Fatalf("networkPrefixes = %v, want %v", got, want)
	}
	if got := NetworkPrefixes([]netip.Prefix{netip.MustParsePrefix("fe80::1/64")}); got != nil {
		t.Fatalf("link-local only: %v, want nil", got)
	}
}
