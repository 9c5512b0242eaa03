package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/mooringlb/mooring/internal/agent/eligibility"
	"github.com/mooringlb/mooring/internal/agent/handoff"
	"github.com/mooringlb/mooring/internal/agent/host"
	"github.com/mooringlb/mooring/internal/agent/ipam"
	"github.com/mooringlb/mooring/internal/membership"
)

// Config is the agent's configuration, one field per `mooring agent` flag
// plus the logger.
type Config struct {
	// Kubeconfig is a kubeconfig file; empty means in-cluster.
	Kubeconfig string
	// NodeName is this node's Kubernetes name; gossip uses it too.
	NodeName string
	// GossipBind and GossipPort are where memberlist listens (UDP and TCP);
	// every agent must use the same port, since peers are found at
	// <Node InternalIP>:<GossipPort>.
	GossipBind string
	GossipPort int
	// GossipAdvertise is the address peers dial, when it differs from the
	// bind address; empty lets memberlist choose.
	GossipAdvertise string
	// GossipKeyFile holds the gossip encryption keys (a Secret mounted as a
	// file: one base64 key per line, the first sent with); re-read every
	// 10 s, so keys rotate without a restart. Empty: no encryption.
	GossipKeyFile string
	// InsecureGossip lets the agent gossip without a key, on a lab network
	// only: anyone reaching the gossip port could join, claim addresses and
	// spread false deaths. Without a key file and without it the agent
	// refuses to start.
	InsecureGossip bool
	// GossipSuspicionMult scales how long gossip suspects a silent member
	// before declaring it failed (membership.DefaultConfig).
	GossipSuspicionMult int
	// NodeCheckWait is how long the kernel check waits for a failed
	// member's node to answer ARP/NDP (0 turns the check off: gossip alone
	// decides); a member whose node answers stays for AgentLossTimeout.
	NodeCheckWait    time.Duration
	AgentLossTimeout time.Duration
	// TakeDelay is the least a returning agent waits after publishing its
	// readiness before it takes addresses; it then waits until every ready
	// peer confirms (gossip metadata, published after its responder let
	// them go) that it counts it, however long; TakeMaxWait ends the wait
	// only for older peers that publish no confirmations, and past it a
	// lagging peer is logged and counted: internal/agent/handoff. Not flags.
	TakeDelay   time.Duration
	TakeMaxWait time.Duration
	// LetGoWait is how long a node that stops serving while it could (a
	// stopping agent, an excluded Node) keeps answering, with the new
	// owners' MACs, for the addresses its peers take from it (make before
	// break, docs/l2.md "Planned hand-offs"); a stopping agent exits after
	// it. Not a flag.
	LetGoWait time.Duration
	// HoldDown is how long an agent that comes back to a cluster serving
	// without it waits before it is a candidate again (0: at once).
	HoldDown time.Duration
	// GratuitousCount and GratuitousInterval shape the gratuitous ARP /
	// unsolicited NA after a takeover (responder.Config).
	GratuitousCount    int
	GratuitousInterval time.Duration
	// MetricsAddr serves /metrics and /healthz; empty disables it.
	MetricsAddr string
	// PprofAddr serves Go's profiles (net/http/pprof); empty: off.
	PprofAddr string
	// SafetyInterval paces the stale-local-address check (it also runs on
	// every address change); ProbeInterval paces the split-brain probe (0
	// disables it), which waits ProbeWait for answers.
	SafetyInterval time.Duration
	ProbeInterval  time.Duration
	ProbeWait      time.Duration
	// SettleTimeout bounds the wait at start-up for gossip to find a peer,
	// so a restarting agent does not briefly claim every address while it
	// still believes it is alone.
	SettleTimeout time.Duration
	// StateDir holds the local snapshot (internal/agent/snapshot); empty:
	// none.
	// SnapshotWait is how long a starting agent waits for its caches to
	// sync before it serves from the snapshot.
	StateDir     string
	SnapshotWait time.Duration
	// QPS and Burst limit the client; the agent writes only on moves.
	QPS   float32
	Burst int
	// Log receives everything; nil discards.
	Log *slog.Logger
	// PodIPAM configures pod address allocation (internal/agent/ipam).
	PodIPAM ipam.Config
	// FastEndpointEviction marks a confirmed-dead node's pods NotReady at
	// once (internal/agent/evict); FastEvictionMaxShare bounds the share of Nodes so
	// treated at a time (at least one).
	FastEndpointEviction bool
	FastEvictionMaxShare float64
	// BGP turns on the BGP speaker (internal/bgpagent).
	BGP BGPConfig
}

// DefaultConfig returns the flag defaults.
func DefaultConfig() Config {
	return Config{
		GossipBind:          "0.0.0.0",
		GossipPort:          7946,
		GossipSuspicionMult: 1,
		NodeCheckWait:       150 * time.Millisecond,
		AgentLossTimeout:    4 * time.Second,
		HoldDown:            3 * time.Second,
		TakeDelay:           500 * time.Millisecond,
		TakeMaxWait:         5 * time.Second,
		LetGoWait:           time.Second,
		GratuitousCount:     5,
		GratuitousInterval:  200 * time.Millisecond,
		MetricsAddr:         ":9473",
		SafetyInterval:      5 * time.Second,
		ProbeInterval:       10 * time.Second,
		ProbeWait:           300 * time.Millisecond,
		SettleTimeout:       3 * time.Second,
		SnapshotWait:        5 * time.Second,
		QPS:                 5,
		Burst:               10,

		FastEvictionMaxShare: 0.34,
		BGP:                  BGPConfig{SecretNamespace: "mooring-system"},
	}
}

// Validate reports every invalid field, saying how to fix it.
func (c Config) Validate() error {
	var errs []error
	if c.NodeName == "" {
		errs = append(errs, errors.New("--node-name is required (the DaemonSet sets NODE_NAME from spec.nodeName)"))
	}
	if _, err := netip.ParseAddr(c.GossipBind); err != nil {
		errs = append(errs, fmt.Errorf("--gossip-bind-address %q is not an IP address", c.GossipBind))
	}
	if c.GossipAdvertise != "" {
		if _, err := netip.ParseAddr(c.GossipAdvertise); err != nil {
			errs = append(errs, fmt.Errorf("--gossip-advertise %q is not an IP address", c.GossipAdvertise))
		}
	}
	if c.GossipPort < 1 || c.GossipPort > 65535 {
		errs = append(errs, fmt.Errorf("--gossip-port %d: want 1..65535", c.GossipPort))
	}
	if c.PprofAddr != "" {
		if _, _, err := net.SplitHostPort(c.PprofAddr); err != nil {
			errs = append(errs, fmt.Errorf("--pprof-addr %q: want host:port, e.g. 127.0.0.1:6060", c.PprofAddr))
		}
	}
	if c.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(c.MetricsAddr); err != nil {
			errs = append(errs, fmt.Errorf("--metrics-addr %q: want host:port, e.g. :9473", c.MetricsAddr))
		}
	}
	if c.SafetyInterval <= 0 || c.SettleTimeout < 0 || c.ProbeInterval < 0 {
		errs = append(errs, errors.New("--safety-interval must be positive; --probe-interval and --settle-timeout must not be negative"))
	}
	if c.ProbeInterval > 0 && (c.ProbeWait <= 0 || c.ProbeWait >= c.ProbeInterval) {
		errs = append(errs, fmt.Errorf("--probe-wait %s: want more than 0 and less than --probe-interval %s", c.ProbeWait, c.ProbeInterval))
	}
	if c.GossipSuspicionMult < 1 {
		errs = append(errs, fmt.Errorf("--gossip-suspicion-mult %d: want at least 1", c.GossipSuspicionMult))
	}
	if c.NodeCheckWait < 0 || c.AgentLossTimeout <= 0 {
		errs = append(errs, errors.New("--node-check-wait must not be negative (0 disables the check) and --agent-loss-timeout must be positive"))
	}
	if c.SnapshotWait < 0 {
		errs = append(errs, errors.New("--snapshot-wait must not be negative"))
	}
	if c.HoldDown < 0 {
		errs = append(errs, errors.New("--hold-down must not be negative"))
	}
	if c.GratuitousCount < 1 || c.GratuitousInterval <= 0 {
		errs = append(errs, errors.New("--gratuitous-count must be at least 1 and --gratuitous-interval positive"))
	}
	switch {
	case c.GossipKeyFile != "" && c.InsecureGossip:
		errs = append(errs, errors.New("--gossip-key-file and --insecure-gossip exclude each other: keep the key file"))
	case c.GossipKeyFile != "":
		if _, err := os.Stat(c.GossipKeyFile); err != nil {
			errs = append(errs, fmt.Errorf("--gossip-key-file: %w", err))
		}
	case !c.InsecureGossip:
		errs = append(errs, errors.New("no gossip key: give --gossip-key-file (the Secret mooring-gossip-key, docs/install.md#gossip-key), or --insecure-gossip on a lab network only"))
	}
	if c.FastEvictionMaxShare <= 0 || c.FastEvictionMaxShare > 1 {
		errs = append(errs, fmt.Errorf("--fast-eviction-max-share %v: want more than 0 and at most 1", c.FastEvictionMaxShare))
	}
	if c.FastEndpointEviction && c.NodeCheckWait == 0 {
		errs = append(errs, errors.New("--fast-endpoint-eviction needs the kernel check (--node-check-wait more than 0): gossip alone cannot tell a dead node from a stalled agent"))
	}
	if err := c.BGP.validate(); err != nil {
		errs = append(errs, err)
	}
	if c.QPS <= 0 || c.Burst < 1 {
		errs = append(errs, errors.New("--kube-api-qps and --kube-api-burst must be positive"))
	}
	return errors.Join(errs...)
}

// membershipConfig is the gossip configuration the agent's flags give.
func (c Config) membershipConfig() membership.Config {
	mc := membership.Config{
		NodeName: c.NodeName, BindAddr: c.GossipBind, BindPort: c.GossipPort, AdvertiseAddr: c.GossipAdvertise,
		KeyFile: c.GossipKeyFile, Insecure: c.InsecureGossip, SuspicionMult: c.GossipSuspicionMult,
		NodeCheckWait: c.NodeCheckWait, AgentLossTimeout: c.AgentLossTimeout,
	}
	if c.NodeCheckWait > 0 {
		mc.NodeCheck, mc.NodeCheckLateSafe = host.KernelCheck(c.NodeCheckWait), true
	}
	return mc
}

// eligibilityConfig is what eligibility and the hand-off are told.
func (c Config) eligibilityConfig() eligibility.Config {
	return eligibility.Config{Node: c.NodeName, GossipBind: c.GossipBind, Handoff: handoff.Config{
		Node: c.NodeName, HoldDown: c.HoldDown, TakeDelay: c.TakeDelay, TakeMaxWait: c.TakeMaxWait}}
}

// resumeThreshold is the shortest stall after which peers may have taken
// this node's addresses: with the kernel check on they hold a failed
// member whose node answers for AgentLossTimeout after gossip declared it
// failed, so a shorter stall is harmless (the 2 s SIGSTOPs move
// nothing); without it gossip alone decides within about a second.
func resumeThreshold(cfg Config) time.Duration {
	if cfg.NodeCheckWait <= 0 {
		return min(time.Second, cfg.AgentLossTimeout)
	}
	return cfg.AgentLossTimeout
}
