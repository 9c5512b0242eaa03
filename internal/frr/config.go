package frr

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Family is an address family of the BGP RIB and the zebra RIB.
type Family int

// The address families a router carries.
const (
	IPv4 Family = iota
	IPv6
)

func (f Family) String() string {
	if f == IPv6 {
		return "ipv6"
	}
	return "ipv4"
}

// GRMode is the router's graceful-restart role (RFC 4724).
type GRMode int

// Graceful-restart modes. FRR's own default, and so the zero value, is
// helper only: the router keeps a restarting peer's routes as stale for
// the peer's restart time, but does not restart gracefully itself.
const (
	GRHelper GRMode = iota
	// GRFull also advertises the router's own restart capability.
	GRFull
	// GRDisabled neither helps nor restarts: a peer's routes go with its
	// session.
	GRDisabled
)

// BFD is a single-hop BFD session's timers (RFC 5880). Interval is used for
// both the desired transmit and the required receive interval, as MetalLB's
// and Mooring's profiles do by default.
type BFD struct {
	Interval   time.Duration // 10ms..60s, whole milliseconds
	Multiplier int           // 2..255
	// Passive waits for the peer's BFD packets before sending any: a
	// router that runs BFD with the peers that ask for it and stays quiet
	// towards the rest.
	Passive bool
}

// Peer holds the settings of one neighbour, or of every dynamic neighbour
// of a listen range.
type Peer struct {
	// RemoteAS is the peer's AS number, or "internal" / "external" (any
	// AS equal to / different from the router's own). Required.
	RemoteAS string
	// Password enables TCP-MD5 (RFC 2385) with this key.
	Password string
	// BFD, when set, ties the session to a BFD session with these timers.
	BFD *BFD
	// Keepalive and Hold are the timers the router proposes (whole
	// seconds; both or neither; FRR's defaults are 60 s and 180 s).
	Keepalive, Hold time.Duration
	// ConnectRetry is the time between connection attempts (FRR: 120 s).
	ConnectRetry time.Duration
	// Multihop allows an eBGP peer this many hops away (0: directly
	// connected only).
	Multihop int
	// Passive waits for the peer to connect.
	Passive bool
	// Port is the peer's TCP port (explicit neighbours only; 0 = 179).
	Port int
	// IPv4Only leaves the IPv6 unicast family off; by default a session
	// carries both families.
	IPv4Only bool
	// SendNone advertises nothing to the peer (an outbound route-map that
	// denies every route, in both families): what a ToR should do towards
	// Mooring's nodes, which use nothing a router sends them and would
	// only keep it in memory (docs/bgp.md, "Configuring the router").
	SendNone bool
}

// Neighbor is an explicitly configured peer.
type Neighbor struct {
	Addr netip.Addr
	Peer
}

// Config is one router. The zero value is not valid: ASN and RouterID are
// required, and it needs ListenRanges or Neighbors to have a session.
type Config struct {
	// Hostname names the router in its logs and in the BGP hostname
	// capability; "frr" when empty.
	Hostname string
	// ASN is the router's own AS number.
	ASN uint32
	// RouterID is the BGP identifier, an IPv4 address.
	RouterID netip.Addr
	// Port is where bgpd listens (0 = 179).
	Port int
	// ListenRanges accept sessions from any address inside them (FRR's
	// "bgp listen range"), each such dynamic neighbour with the settings
	// of Dynamic. ListenLimit caps their number (0: FRR's 100).
	ListenRanges []netip.Prefix
	Dynamic      Peer
	ListenLimit  int
	// Neighbors are explicitly configured peers.
	Neighbors []Neighbor
	// MaximumPaths is how many equal-cost BGP paths zebra installs as one
	// ECMP route, for eBGP and iBGP (0 = 64; 1 turns ECMP off). Paths from
	// peers of different AS numbers count as equal (as-path
	// multipath-relax), as on a ToR that peers with one AS per node.
	MaximumPaths int
	// GracefulRestart is the router's GR role; StalePathTime bounds how
	// long it keeps a restarting peer's routes (0: FRR's 360 s).
	GracefulRestart GRMode
	StalePathTime   time.Duration
	// Originate are prefixes the router advertises itself.
	Originate []netip.Prefix
	// Extra lines go verbatim at the end of the `router bgp` block, for
	// settings this type does not model. One line each, no newlines.
	Extra []string
}

// dynamicGroup is the peer group of the listen ranges' neighbours.
const dynamicGroup = "dynamic"

// defaultMaximumPaths is MaximumPaths' default: far more than a lab has
// nodes, well below FRR's compiled limit (Debian builds with 256).
const defaultMaximumPaths = 64

// Validate reports every unusable field, naming it.
func (c *Config) Validate() error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf("frr: "+format, a...)) }
	if c.ASN == 0 {
		add("ASN 0: set the router's own AS number")
	}
	if !c.RouterID.Is4() {
		add("router ID %v: use an IPv4 address", c.RouterID)
	}
	if c.Hostname != "" && !isWord(c.Hostname) {
		add("hostname %q: use letters, digits, '-', '_' and '.' only", c.Hostname)
	}
	if c.Port < 0 || c.Port > 65535 || c.ListenLimit < 0 || c.MaximumPaths < 0 || c.MaximumPaths > 256 {
		add("port %d, listen limit %d or maximum-paths %d out of range", c.Port, c.ListenLimit, c.MaximumPaths)
	}
	if c.StalePathTime < 0 || c.StalePathTime%time.Second != 0 {
		add("stale path time %s: use whole seconds", c.StalePathTime)
	}
	for _, p := range c.ListenRanges {
		if !p.IsValid() || p != p.Masked() {
			add("listen range %v: use a network prefix such as 10.213.0.0/24", p)
		}
	}
	if len(c.ListenRanges) > 0 {
		errs = append(errs, c.Dynamic.validate("listen ranges' peer"))
	}
	seen := map[netip.Addr]bool{}
	for _, n := range c.Neighbors {
		if !n.Addr.IsValid() || seen[n.Addr] {
			add("neighbor %v: missing or repeated address", n.Addr)
		}
		seen[n.Addr] = true
		errs = append(errs, n.validate("neighbor "+n.Addr.String()))
	}
	for _, p := range c.Originate {
		if !p.IsValid() || p != p.Masked() {
			add("originated prefix %v: use a network prefix", p)
		}
	}
	for _, l := range c.Extra {
		if strings.ContainsAny(l, "\r\n") {
			add("extra line %q: one line each", l)
		}
	}
	return errors.Join(errs...)
}

func (p *Peer) validate(who string) error {
	var errs []error
	add := func(format string, a ...any) { errs = append(errs, fmt.Errorf("frr: "+who+": "+format, a...)) }
	if p.RemoteAS != "internal" && p.RemoteAS != "external" {
		if n, err := strconv.ParseUint(p.RemoteAS, 10, 32); err != nil || n == 0 {
			add("remote AS %q: use an AS number, internal or external", p.RemoteAS)
		}
	}
	if p.Password != "" && (strings.ContainsAny(p.Password, " \t\r\n") || len(p.Password) > 80) {
		add("password: up to 80 characters without white space")
	}
	if b := p.BFD; b != nil && (b.Interval < 10*time.Millisecond || b.Interval > time.Minute ||
		b.Interval%time.Millisecond != 0 || b.Multiplier < 2 || b.Multiplier > 255) {
		add("BFD %s × %d: use 10ms..60s in whole milliseconds and a multiplier of 2..255", b.Interval, b.Multiplier)
	}
	if (p.Keepalive == 0) != (p.Hold == 0) || p.Keepalive%time.Second != 0 || p.Hold%time.Second != 0 ||
		p.Keepalive < 0 || p.Hold < 0 || p.Hold > 0 && p.Hold < 3*time.Second || p.Keepalive > p.Hold {
		add("timers keepalive %s hold %s: set both in whole seconds, hold 0 or ≥ 3s and ≥ keepalive", p.Keepalive, p.Hold)
	}
	if p.ConnectRetry < 0 || p.ConnectRetry%time.Second != 0 || p.Multihop < 0 || p.Multihop > 255 ||
		p.Port < 0 || p.Port > 65535 {
		add("connect retry %s, multihop %d or port %d out of range", p.ConnectRetry, p.Multihop, p.Port)
	}
	return errors.Join(errs...)
}

// isWord reports whether s is safe as one configuration word.
func isWord(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.", r)) {
			return false
		}
	}
	return s != ""
}

// Files renders the daemons' configuration files, keyed by file name
// (zebra.conf, bgpd.conf, bfdd.conf). It validates c first.
func (c *Config) Files() (map[string]string, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	host := c.Hostname
	if host == "" {
		host = "frr"
	}
	zebra := "hostname " + host + "\nip forwarding\nipv6 forwarding\n"
	return map[string]string{
		"zebra.conf": zebra,
		"bgpd.conf":  "hostname " + host + "\n" + c.bgpd(),
		"bfdd.conf":  "hostname " + host + "\n" + c.bfdd(),
	}, nil
}

// bfdProfile names the BFD profile of timers b.
func bfdProfile(b *BFD) string {
	name := fmt.Sprintf("t%dx%d", b.Interval.Milliseconds(), b.Multiplier)
	if b.Passive {
		name += "p"
	}
	return name
}

// bfdd renders one profile per distinct BFD setting.
func (c *Config) bfdd() string {
	var profiles []*BFD
	add := func(b *BFD) {
		if b != nil && !slices.ContainsFunc(profiles, func(o *BFD) bool { return *o == *b }) {
			profiles = append(profiles, b)
		}
	}
	if len(c.ListenRanges) > 0 {
		add(c.Dynamic.BFD)
	}
	for _, n := range c.Neighbors {
		add(n.BFD)
	}
	var b strings.Builder
	b.WriteString("bfd\n")
	for _, p := range profiles {
		ms := p.Interval.Milliseconds()
		fmt.Fprintf(&b, " profile %s\n  detect-multiplier %d\n  receive-interval %d\n  transmit-interval %d\n",
			bfdProfile(p), p.Multiplier, ms, ms)
		if p.Passive {
			b.WriteString("  passive-mode\n")
		}
		b.WriteString(" exit\n")
	}
	b.WriteString("exit\n")
	return b.String()
}

// bgpd renders the router bgp block.
func (c *Config) bgpd() string {
	var b strings.Builder
	line := func(format string, a ...any) { fmt.Fprintf(&b, format+"\n", a...) }
	if c.sendsNone() {
		line("route-map %s deny 10", sendNoneMap)
		line("exit")
	}
	line("router bgp %d", c.ASN)
	line(" bgp router-id %s", c.RouterID)
	// A lab router accepts and installs what its peers send: FRR 8's
	// default for eBGP is to drop everything without a policy.
	line(" no bgp ebgp-requires-policy")
	line(" no bgp network import-check")
	line(" bgp bestpath as-path multipath-relax")
	switch c.GracefulRestart {
	case GRFull:
		line(" bgp graceful-restart")
	case GRDisabled:
		line(" bgp graceful-restart-disable")
	}
	if c.StalePathTime > 0 {
		line(" bgp graceful-restart stalepath-time %d", int(c.StalePathTime/time.Second))
	}
	if len(c.ListenRanges) > 0 {
		line(" neighbor %s peer-group", dynamicGroup)
		c.Dynamic.render(line, dynamicGroup)
		for _, p := range c.ListenRanges {
			line(" bgp listen range %s peer-group %s", p, dynamicGroup)
		}
		if c.ListenLimit > 0 {
			line(" bgp listen limit %d", c.ListenLimit)
		}
	}
	for _, n := range c.Neighbors {
		n.render(line, n.Addr.String())
	}
	paths := c.MaximumPaths
	if paths == 0 {
		paths = defaultMaximumPaths
	}
	for _, f := range []Family{IPv4, IPv6} {
		c.family(line, f, paths)
	}
	for _, l := range c.Extra {
		line(" %s", l)
	}
	line("exit")
	return b.String()
}

// sendNoneMap is the route-map of the peers with SendNone.
const sendNoneMap = "send-none"

// sendsNone reports whether any peer has SendNone.
func (c *Config) sendsNone() bool {
	if len(c.ListenRanges) > 0 && c.Dynamic.SendNone {
		return true
	}
	return slices.ContainsFunc(c.Neighbors, func(n Neighbor) bool { return n.SendNone })
}

// family renders one address-family block.
func (c *Config) family(line func(string, ...any), f Family, paths int) {
	line(" address-family %s unicast", f)
	line("  maximum-paths %d", paths)
	line("  maximum-paths ibgp %d", paths)
	for _, p := range c.Originate {
		if p.Addr().Is4() == (f == IPv4) {
			line("  network %s", p)
		}
	}
	if f == IPv6 {
		// The traditional profile activates IPv4 unicast for every
		// neighbour, IPv6 for none.
		if len(c.ListenRanges) > 0 && !c.Dynamic.IPv4Only {
			line("  neighbor %s activate", dynamicGroup)
		}
		for _, n := range c.Neighbors {
			if !n.IPv4Only {
				line("  neighbor %s activate", n.Addr)
			}
		}
	}
	// After the activations: the route-map applies to an active family.
	if len(c.ListenRanges) > 0 && c.Dynamic.SendNone && (f == IPv4 || !c.Dynamic.IPv4Only) {
		line("  neighbor %s route-map %s out", dynamicGroup, sendNoneMap)
	}
	for _, n := range c.Neighbors {
		if n.SendNone && (f == IPv4 || !n.IPv4Only) {
			line("  neighbor %s route-map %s out", n.Addr, sendNoneMap)
		}
	}
	line(" exit-address-family")
}

// render writes p's neighbour lines for name (an address or a peer group).
func (p *Peer) render(line func(string, ...any), name string) {
	line(" neighbor %s remote-as %s", name, p.RemoteAS)
	if p.Port != 0 {
		line(" neighbor %s port %d", name, p.Port)
	}
	if p.Password != "" {
		line(" neighbor %s password %s", name, p.Password)
	}
	if p.Hold != 0 {
		line(" neighbor %s timers %d %d", name, int(p.Keepalive/time.Second), int(p.Hold/time.Second))
	}
	if p.ConnectRetry != 0 {
		line(" neighbor %s timers connect %d", name, int(p.ConnectRetry/time.Second))
	}
	if p.Multihop > 0 {
		line(" neighbor %s ebgp-multihop %d", name, p.Multihop)
	}
	if p.Passive {
		line(" neighbor %s passive", name)
	}
	if p.BFD != nil {
		line(" neighbor %s bfd profile %s", name, bfdProfile(p.BFD))
	}
}
