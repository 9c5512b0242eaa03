package membership

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"
)

// Config describes one member. Start from DefaultConfig and set NodeName:
// zero durations and counts take the defaults, but a zero BindPort means
// "let the kernel choose", not DefaultPort.
type Config struct {
	// NodeName must be unique in the cluster: the Kubernetes node name.
	NodeName string
	// BindAddr is the address to listen on (UDP and TCP); default 0.0.0.0.
	BindAddr string
	// BindPort is the port to listen on; 0 lets the kernel choose (tests),
	// and Addr reports the choice. The agent uses DefaultPort.
	BindPort int
	// AdvertiseAddr/AdvertisePort are what peers should dial, when they
	// differ from the bind address (e.g. binding 0.0.0.0). Optional.
	AdvertiseAddr string
	AdvertisePort int

	// ProbeInterval is how often each member probes one other member;
	// ProbeTimeout is how long it waits for the direct ack before asking
	// others to probe indirectly. GossipInterval paces gossip of state
	// changes. SuspicionMult scales how long a suspect has to refute before
	// it is declared dead (see DefaultConfig for the arithmetic).
	ProbeInterval  time.Duration
	ProbeTimeout   time.Duration
	GossipInterval time.Duration
	SuspicionMult  int
	// TCPTimeout bounds a join or push/pull over TCP; default 2s (LAN).
	TCPTimeout time.Duration
	// RejoinInterval is how often Run tries to join peers (SetPeers) that
	// are not live members, which heals partitions; default 1s.
	RejoinInterval time.Duration
	// LeaveTimeout bounds the graceful leave when Run's context ends;
	// default 1s.
	LeaveTimeout time.Duration
	// SecretKey, if set (16, 24 or 32 bytes), encrypts gossip with AES-GCM.
	SecretKey []byte
	// KeyFile, if set, holds the gossip keys instead (keys.go: one base64
	// key per line, the first sent with); it is re-read every
	// KeyReloadInterval (default 10s), so a Secret can be rotated live.
	KeyFile           string
	KeyReloadInterval time.Duration
	// Insecure lets the member gossip with neither SecretKey nor KeyFile:
	// anyone who reaches its port can then join, claim a node's name and
	// spread false deaths. Without a key and without Insecure the Config
	// is invalid (the agent's --insecure-gossip sets it).
	Insecure bool

	// NodeCheck, if set, is the kernel's second opinion (hold.go): a member
	// gossip declares failed stays live while its node answers it, for up
	// to AgentLossTimeout (default 5s), re-checked every NodeCheckInterval
	// (default 500ms); NodeCheckWait is how long one check may wait for an
	// answer (the caller's; used to bound it, default 150ms).
	NodeCheck NodeCheck
	// RingInterval is how often a member with a NodeCheck pings its
	// successor in name order (ring.go); default ProbeInterval, negative:
	// no ring pings.
	RingInterval      time.Duration
	NodeCheckWait     time.Duration
	NodeCheckInterval time.Duration
	AgentLossTimeout  time.Duration
	// NodeCheckLateSafe says that NodeCheck counts its wait from its
	// request's departure and reads every answer that arrived before it
	// concludes "no answer", however late its goroutine ran (a starved or
	// stopped agent): a check that took longer than its wait is then no
	// reason to distrust an early drop (suspect.go). host.KernelCheck is
	// (internal/arpprobe drains its socket).
	NodeCheckLateSafe bool
}

// DefaultPort is memberlist's customary port.
const DefaultPort = 7946

// DefaultConfig returns the tuned defaults for a LAN of a few to tens of
// nodes, aiming at about 1 s from a hard node loss to every member knowing.
//
// memberlist's own DefaultLANConfig (probe 1 s, timeout 500 ms, suspicion
// mult 4) takes ~5-6 s: one probe interval until the dead node is probed, a
// failed probe round, then suspicion for
//
//	SuspicionMult * max(1, log10(N)) * ProbeInterval
//
// (with k = SuspicionMult-2 confirmations expected first, else up to
// SuspicionMaxTimeoutMult times that). Here:
//   - ProbeInterval 200ms: each member probes one peer five times a second;
//     at tens of nodes that is still only a few hundred tiny UDP packets/s.
//   - ProbeTimeout 100ms: LAN round trips are well under 1 ms; 100 ms leaves
//     room for a busy node (and memberlist's awareness back-off stretches it
//     further for a member that is itself slow, which avoids false alarms).
//   - SuspicionMult 2: k = 0, so the suspicion timer is its minimum,
//     2 * 200ms = 400ms up to 10 nodes (520 ms at 20, 600 ms at 31): long
//     enough for a live-but-suspected node to refute via gossip (GossipInterval
//     100ms, several chances), short enough for the 1 s target.
//   - GossipInterval 100ms: the dead message reaches everyone in a few rounds.
//
// Expected detection: ~P/2 until a prober picks the dead node, + P for the
// failed direct and indirect probe, + 400 ms suspicion, + ~100 ms gossip:
// about 0.8-1.0 s. The measured figure is in the package tests' log.
func DefaultConfig() Config {
	return Config{
		BindAddr:       "0.0.0.0",
		BindPort:       DefaultPort,
		ProbeInterval:  200 * time.Millisecond,
		ProbeTimeout:   100 * time.Millisecond,
		GossipInterval: 100 * time.Millisecond,
		SuspicionMult:  2,
		TCPTimeout:     2 * time.Second,
		RejoinInterval: time.Second,
		LeaveTimeout:   time.Second,
	}
}

// withDefaults fills zero fields from DefaultConfig, except BindPort (0 is
// meaningful) and NodeName.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.BindAddr == "" {
		c.BindAddr = d.BindAddr
	}
	setDur := func(p *time.Duration, v time.Duration) {
		if *p == 0 {
			*p = v
		}
	}
	setDur(&c.ProbeInterval, d.ProbeInterval)
	setDur(&c.ProbeTimeout, d.ProbeTimeout)
	setDur(&c.GossipInterval, d.GossipInterval)
	setDur(&c.TCPTimeout, d.TCPTimeout)
	setDur(&c.RejoinInterval, d.RejoinInterval)
	setDur(&c.LeaveTimeout, d.LeaveTimeout)
	setDur(&c.KeyReloadInterval, 10*time.Second)
	setDur(&c.RingInterval, c.ProbeInterval)
	setDur(&c.NodeCheckWait, 150*time.Millisecond)
	setDur(&c.NodeCheckInterval, 500*time.Millisecond)
	setDur(&c.AgentLossTimeout, 5*time.Second)
	if c.SuspicionMult == 0 {
		c.SuspicionMult = d.SuspicionMult
	}
	return c
}

// Validate reports the first invalid field, after defaults are applied.
func (c Config) Validate() error {
	c = c.withDefaults()
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("NodeName is required (use the Kubernetes node name)"))
	}
	if net.ParseIP(c.BindAddr) == nil {
		errs = append(errs, fmt.Errorf("BindAddr %q is not an IP address", c.BindAddr))
	}
	if c.BindPort < 0 || c.BindPort > 65535 || c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		errs = append(errs, errors.New("BindPort and AdvertisePort must be in 0..65535"))
	}
	if c.AdvertiseAddr != "" && net.ParseIP(c.AdvertiseAddr) == nil {
		errs = append(errs, fmt.Errorf("AdvertiseAddr %q is not an IP address", c.AdvertiseAddr))
	}
	for name, d := range map[string]time.Duration{
		"ProbeInterval": c.ProbeInterval, "ProbeTimeout": c.ProbeTimeout, "GossipInterval": c.GossipInterval,
		"TCPTimeout": c.TCPTimeout, "RejoinInterval": c.RejoinInterval, "LeaveTimeout": c.LeaveTimeout,
		"KeyReloadInterval": c.KeyReloadInterval, "NodeCheckWait": c.NodeCheckWait,
		"NodeCheckInterval": c.NodeCheckInterval, "AgentLossTimeout": c.AgentLossTimeout,
	} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("%s %s must not be negative", name, d))
		}
	}
	if c.ProbeTimeout >= c.ProbeInterval {
		errs = append(errs, fmt.Errorf("ProbeTimeout %s must be shorter than ProbeInterval %s", c.ProbeTimeout, c.ProbeInterval))
	}
	if c.SuspicionMult < 1 {
		errs = append(errs, fmt.Errorf("SuspicionMult %d must be at least 1", c.SuspicionMult))
	}
	switch len(c.SecretKey) {
	case 0, 16, 24, 32:
	default:
		errs = append(errs, fmt.Errorf("SecretKey has %d bytes, want 16, 24 or 32", len(c.SecretKey)))
	}
	if len(c.SecretKey) > 0 && c.KeyFile != "" {
		errs = append(errs, errors.New("set SecretKey or KeyFile, not both"))
	}
	keyed := len(c.SecretKey) > 0 || c.KeyFile != ""
	switch {
	case !keyed && !c.Insecure:
		errs = append(errs, errors.New("no gossip key: set KeyFile (the agent's --gossip-key-file: the Secret mooring-gossip-key, docs/install.md#gossip-key), or Insecure (--insecure-gossip) on a lab network only"))
	case keyed && c.Insecure:
		errs = append(errs, errors.New("a gossip key and Insecure (--insecure-gossip) together: drop one"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("membership: invalid config: %w", err)
	}
	return nil
}

// normalizePeer turns "host" or "host:port" into "host:port".
func normalizePeer(p string, defaultPort int) string {
	if _, _, err := net.SplitHostPort(p); err == nil {
		return p
	}
	return net.JoinHostPort(strings.Trim(p, "[]"), strconv.Itoa(defaultPort))
}
