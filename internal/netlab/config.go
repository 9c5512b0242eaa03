package netlab

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
)

// Address offsets inside the lab subnets; documented in the package comment.
const (
	nodeOffsetBase = 10
	clientOffset   = 250
	// MaxNodes keeps node offsets below the client's and below the pool
	// range (100-199) that tests use for LoadBalancer addresses.
	MaxNodes = 89
)

// Offsets on the link AttachBehind makes (same in both subnets).
const (
	// BehindGatewayOffset is the address of the host in front (the
	// router): 10.214.0.1 and fd00:214::1 for 10.214.0.0/24, fd00:214::/64.
	BehindGatewayOffset = 1
	// BehindHostOffset is the address of the host behind: 10.214.0.250
	// and fd00:214::fa.
	BehindHostOffset = clientOffset
)

// Default names and subnets.
const (
	DefaultBridge = "br0"
	ClientName    = "client"
)

var (
	// DefaultSubnet4 is the IPv4 subnet used when Config.Subnet4 is zero.
	DefaultSubnet4 = netip.MustParsePrefix("10.213.0.0/24")
	// DefaultSubnet6 is the IPv6 subnet used when Config.Subnet6 is zero.
	DefaultSubnet6 = netip.MustParsePrefix("fd00:213::/64")
)

// Sentinel errors.
var (
	// ErrUnsupported is returned on systems without network namespaces.
	ErrUnsupported = errors.New("netlab: network namespaces need Linux")
	// ErrPrivileges is returned by Check (wrapped, with the cause) when the
	// process may not create network namespaces or raw sockets.
	ErrPrivileges = errors.New("netlab: need CAP_SYS_ADMIN, CAP_NET_ADMIN and CAP_NET_RAW (run as root, or under `unshare -Urn`)")
	// ErrClosed is returned by Host methods after Lab.Close.
	ErrClosed = errors.New("netlab: lab closed")
	// ErrNoNeighbor is returned by Host.Neighbor when the table has no entry.
	ErrNoNeighbor = errors.New("netlab: no neighbour entry")
)

// Config describes a lab. The zero value plus Nodes is a valid lab.
type Config struct {
	// Nodes is the number of node hosts, named node-1..node-N (1..MaxNodes).
	Nodes int
	// Subnet4 is the IPv4 subnet of the lab link; DefaultSubnet4 if zero.
	// It must hold offset 250 (the client), so at most a /24.
	Subnet4 netip.Prefix
	// Subnet6 is the IPv6 subnet of the lab link; DefaultSubnet6 if zero.
	Subnet6 netip.Prefix
	// Bridge names the bridge in the bridge namespace; DefaultBridge if empty.
	Bridge string
	// NodeSysctls are written in every node namespace before its veth
	// appears, e.g. {"net.ipv4.conf.all.arp_ignore": "1",
	// "net.ipv4.conf.all.arp_announce": "2"} for VIPs on lo. Keys must be
	// under net. (only /proc/sys/net follows the thread's namespace). To set
	// one node apart, call Host.Sysctl on it after New.
	NodeSysctls map[string]string
	// ClientSysctls are the same for the client, which otherwise keeps kernel
	// defaults like any machine on the segment.
	ClientSysctls map[string]string
	// NoClient builds no client on the bridge (Client returns nil): for a
	// lab whose client sits behind a router instead (see AttachBehind).
	NoClient bool
}

// withDefaults returns cfg with zero fields filled in.
func (cfg Config) withDefaults() Config {
	if !cfg.Subnet4.IsValid() {
		cfg.Subnet4 = DefaultSubnet4
	}
	if !cfg.Subnet6.IsValid() {
		cfg.Subnet6 = DefaultSubnet6
	}
	if cfg.Bridge == "" {
		cfg.Bridge = DefaultBridge
	}
	return cfg
}

// Validate reports the first problem with cfg (after defaults are applied).
func (cfg Config) Validate() error {
	cfg = cfg.withDefaults()
	if cfg.Nodes < 1 || cfg.Nodes > MaxNodes {
		return fmt.Errorf("netlab: Nodes = %d, want 1..%d", cfg.Nodes, MaxNodes)
	}
	if !cfg.Subnet4.Addr().Is4() || cfg.Subnet4.Bits() > 24 {
		return fmt.Errorf("netlab: Subnet4 %s: want an IPv4 prefix of /24 or shorter", cfg.Subnet4)
	}
	if !cfg.Subnet6.Addr().Is6() || cfg.Subnet6.Addr().Is4In6() || cfg.Subnet6.Bits() > 120 {
		return fmt.Errorf("netlab: Subnet6 %s: want an IPv6 prefix of /120 or shorter", cfg.Subnet6)
	}
	for _, p := range []netip.Prefix{cfg.Subnet4, cfg.Subnet6} {
		if p != p.Masked() {
			return fmt.Errorf("netlab: subnet %s has host bits set; use %s", p, p.Masked())
		}
	}
	if len(cfg.Bridge) > 15 || strings.ContainsAny(cfg.Bridge, "/ \t\n") {
		return fmt.Errorf("netlab: bridge name %q: want at most 15 characters, no '/' or spaces", cfg.Bridge)
	}
	for _, m := range []map[string]string{cfg.NodeSysctls, cfg.ClientSysctls} {
		for k := range m {
			if _, err := sysctlPath(k); err != nil {
				return err
			}
		}
	}
	return nil
}

// NodeName is the name of node i (1-based).
func NodeName(i int) string { return fmt.Sprintf("node-%d", i) }

// hostSpec is the plan for one host, derived from Config alone.
type hostSpec struct {
	name    string
	addr4   netip.Addr
	addr6   netip.Addr
	sysctls map[string]string
}

// plan lists the hosts of cfg (nodes first, then the client unless
// NoClient). cfg must be
// valid and defaulted.
func (cfg Config) plan() []hostSpec {
	specs := make([]hostSpec, 0, cfg.Nodes+1)
	for i := 1; i <= cfg.Nodes; i++ {
		specs = append(specs, hostSpec{
			name:    NodeName(i),
			addr4:   addOffset(cfg.Subnet4.Addr(), nodeOffsetBase+i),
			addr6:   addOffset(cfg.Subnet6.Addr(), nodeOffsetBase+i),
			sysctls: cfg.NodeSysctls,
		})
	}
	if cfg.NoClient {
		return specs
	}
	return append(specs, hostSpec{
		name:    ClientName,
		addr4:   addOffset(cfg.Subnet4.Addr(), clientOffset),
		addr6:   addOffset(cfg.Subnet6.Addr(), clientOffset),
		sysctls: cfg.ClientSysctls,
	})
}

// addOffset adds a small offset (< 256) to the last bytes of a. Validate
// guarantees the subnets have at least 8 host bits, so no carry crosses the
// prefix.
func addOffset(a netip.Addr, off int) netip.Addr {
	b := a.AsSlice()
	carry := off
	for i := len(b) - 1; i >= 0 && carry > 0; i-- {
		sum := int(b[i]) + carry
		b[i] = byte(sum)
		carry = sum >> 8
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

// sysctlPath turns "net.ipv4.conf.all.arp_ignore" or
// "net/ipv4/conf/eth0.100/arp_ignore" into a path under /proc/sys. Use the
// slash form when an interface name contains a dot.
func sysctlPath(key string) (string, error) {
	rel := key
	if !strings.Contains(rel, "/") {
		rel = strings.ReplaceAll(rel, ".", "/")
	}
	if !strings.HasPrefix(rel, "net/") || strings.Contains(rel, "..") {
		return "", fmt.Errorf("netlab: sysctl %q: only keys under net. follow the network namespace", key)
	}
	return "/proc/sys/" + rel, nil
}
