// Package agent is the `mooring agent` verb: flags into agent.Config, then
// agent.Run. No logic lives here.
package agent

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/mooringlb/mooring/internal/agent"
	"github.com/mooringlb/mooring/internal/agent/evict"
	"github.com/mooringlb/mooring/internal/cliutil"
)

// EnvNodeName is where the DaemonSet puts the node's name (from
// spec.nodeName) when --node-name is not given.
const EnvNodeName = "NODE_NAME"

// NewCommand builds `mooring agent`.
func NewCommand(deps *cliutil.Deps) *cobra.Command {
	cfg := agent.DefaultConfig()
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Answer ARP and NDP for this node's share of the LoadBalancer addresses (runs on every node)",
		Long: `The L2 announcement agent runs on every node (a DaemonSet with hostNetwork).
For every address that an L2AnnouncementPolicy selects, exactly one live
eligible node answers ARP (IPv4) and NDP (IPv6), chosen by a ranking every
agent computes alike from its informer caches and gossip membership: no
leases, no API writes for the election. When a node dies, the next node in
the ranking takes over within about a second and announces the move with
gratuitous ARP and unsolicited neighbour advertisements.`,
		Args: cobra.NoArgs,
		// The flags are checked before the agent starts anything: a wrong
		// one is a usage error (exit 2), not a failed agent.
		PreRunE: func(*cobra.Command, []string) error {
			if cfg.NodeName == "" {
				cfg.NodeName = os.Getenv(EnvNodeName)
			}
			if cfg.MetricsAddr == cliutil.MetricsDisabled {
				cfg.MetricsAddr = "" // the shared wording: "0" disables it
			}
			if r := cfg.PodIPAM.Routes; r != "direct" && r != "none" {
				return fmt.Errorf("--pod-routes %q: use direct or none", r)
			}
			return cfg.Validate()
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg.Log = deps.Log.With("component", "agent")
			return agent.Run(cmd.Context(), cfg)
		},
	}
	cliutil.AddKubeconfigFlag(cmd, &cfg.Kubeconfig)
	cliutil.AddMetricsAddrFlag(cmd, &cfg.MetricsAddr, cfg.MetricsAddr)
	cliutil.AddPprofAddrFlag(cmd, &cfg.PprofAddr)
	f := cmd.Flags()
	f.StringVar(&cfg.NodeName, "node-name", "", "this node's Kubernetes name (default $"+EnvNodeName+")")
	f.StringVar(&cfg.GossipBind, "gossip-bind-address", cfg.GossipBind, "address the gossip protocol listens on (UDP and TCP) and peers dial: the node's own (the DaemonSet passes status.hostIP)")
	f.StringVar(&cfg.GossipBind, "gossip-bind", cfg.GossipBind, "")
	_ = f.MarkDeprecated("gossip-bind", "use --gossip-bind-address")
	f.IntVar(&cfg.GossipPort, "gossip-port", cfg.GossipPort, "gossip port; the same on every node, peers are dialled at <Node InternalIP>:<port>")
	f.StringVar(&cfg.GossipAdvertise, "gossip-advertise", "", "address peers dial when it differs from --gossip-bind")
	f.StringVar(&cfg.GossipKeyFile, "gossip-key-file", "", "file of gossip encryption keys, one base64 16/24/32-byte key per line, the first sent with (a Secret; re-read every 10 s for rotation); required unless --insecure-gossip")
	f.BoolVar(&cfg.InsecureGossip, "insecure-gossip", false, "gossip without a key, on a lab network only: anyone who reaches the gossip port can join, claim addresses and spread false deaths (doctor reports it)")
	f.IntVar(&cfg.GossipSuspicionMult, "gossip-suspicion-mult", cfg.GossipSuspicionMult, "how many probe intervals gossip suspects a silent member before declaring it failed")
	f.DurationVar(&cfg.NodeCheckWait, "node-check-wait", cfg.NodeCheckWait, "how long to wait for a failed member's node to answer ARP/NDP before its addresses move (a live kernel means a stalled agent: nothing moves); 0 disables the check")
	f.DurationVar(&cfg.AgentLossTimeout, "agent-loss-timeout", cfg.AgentLossTimeout, "how long a member whose node still answers ARP/NDP keeps its addresses after its agent went silent")
	f.DurationVar(&cfg.HoldDown, "hold-down", cfg.HoldDown, "how long an agent coming back to a cluster that served without it waits before taking addresses back (its node's data path settles first); 0: at once")
	f.IntVar(&cfg.GratuitousCount, "gratuitous-count", cfg.GratuitousCount, "gratuitous ARP / unsolicited NA rounds after a takeover (the first at once)")
	f.DurationVar(&cfg.GratuitousInterval, "gratuitous-interval", cfg.GratuitousInterval, "gap before the second gratuitous round; each later gap doubles")
	f.DurationVar(&cfg.SafetyInterval, "safety-interval", cfg.SafetyInterval, "how often to look for stale local copies of announced addresses")
	f.DurationVar(&cfg.ProbeInterval, "probe-interval", cfg.ProbeInterval, "how often the owner probes its addresses for a second responder; 0 disables")
	f.DurationVar(&cfg.ProbeWait, "probe-wait", cfg.ProbeWait, "how long a split-brain probe waits for answers")
	f.DurationVar(&cfg.SettleTimeout, "settle-timeout", cfg.SettleTimeout, "how long to wait at start for gossip to reach a peer before announcing")
	f.StringVar(&cfg.StateDir, "state-dir", cfg.StateDir, "folder for the local snapshot of what this agent announces and why (a hostPath), served from when the API server is unreachable at start; empty: none")
	f.DurationVar(&cfg.SnapshotWait, "snapshot-wait", cfg.SnapshotWait, "how long a starting agent waits for the API server before it serves from the snapshot in --state-dir")
	f.Float32Var(&cfg.QPS, "kube-api-qps", cfg.QPS, "client-side limit of API requests per second")
	f.IntVar(&cfg.Burst, "kube-api-burst", cfg.Burst, "client-side burst of API requests")
	f.BoolVar(&cfg.FastEndpointEviction, "fast-endpoint-eviction", cfg.FastEndpointEviction, "when gossip loses a node AND its kernel answers no ARP/NDP, mark its pods NotReady at once (reason "+evict.PodReasonNodeUnreachable+") so their endpoints leave Services now, not after the node-monitor grace period; the kubelet marks them Ready again if the node is alive")
	f.Float64Var(&cfg.FastEvictionMaxShare, "fast-eviction-max-share", cfg.FastEvictionMaxShare, "at most this share of the Nodes (but at least one) have their pods marked NotReady by --fast-endpoint-eviction at a time")
	addPodIPAMFlags(f, &cfg.PodIPAM)
	f.BoolVar(&cfg.BGP.Enabled, "bgp", cfg.BGP.Enabled, "run the BGP speaker: advertise the addresses BGPAdvertisements select to the BGPPeers that select this node (docs/bgp.md); idle while none does. Needs the mooring-agent-bgp role")
	f.IntVar(&cfg.BGP.ListenPort, "bgp-listen-port", cfg.BGP.ListenPort, "port the BGP speaker accepts sessions on (179 is BGP's); 0: it only connects out to its peers")
	f.StringVar(&cfg.BGP.SecretNamespace, "bgp-secret-namespace", cfg.BGP.SecretNamespace, "namespace of the BGPPeers' password Secrets (Mooring's own; the agent may read Secrets only there, and only those its peers name)")
	cmd.AddCommand(newInstallCNICommand(deps))
	return cmd
}
