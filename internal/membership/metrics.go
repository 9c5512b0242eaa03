package membership

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

type metrics struct {
	live            prometheus.Gauge
	joins           prometheus.Counter
	failures        prometheus.Counter
	leaves          prometheus.Counter
	held            prometheus.Gauge
	refuted         prometheus.Counter
	early           prometheus.Counter
	earlyDistrusted prometheus.Counter
	ringFailed      prometheus.Counter
	insecure        prometheus.Gauge
	metaRetries     prometheus.Counter
	metaRepeats     prometheus.Counter
	tookSent        prometheus.Counter
	tookReceived    prometheus.Counter
	suspectSent     prometheus.Counter
	suspectReceived prometheus.Counter
}

// newMetrics builds the metrics and registers them on reg (nil: not
// registered).
func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		live: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_members_live",
			Help: "Live members of the agents' gossip cluster as this member sees them, itself included.",
		}),
		joins: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_joins_total",
			Help: "Members seen joining (or coming back).",
		}),
		failures: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_failures_total",
			Help: "Members declared dead by failure detection.",
		}),
		leaves: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_leaves_total",
			Help: "Members that left gracefully.",
		}),
		held: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_members_held",
			Help: "Members gossip declared failed whose node still answers ARP/NDP, kept live (a stalled agent) for up to the agent-loss timeout.",
		}),
		refuted: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_false_failures_total",
			Help: "Members gossip declared failed that came back while their node still answered: a false death that moved nothing.",
		}),
		metaRetries: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_meta_retries_total",
			Help: "Times gossip did not take this member's new metadata (an update overtaken by a refutation of its own death, at a restart) and it was published again.",
		}),
		metaRepeats: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_meta_repeats_total",
			Help: "Times this member published unchanged metadata again after a change (a second and third broadcast, so that a peer that missed the first does not wait for the next push/pull).",
		}),
		tookSent: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_took_sent_total",
			Help: "Took messages this returning member sent its peers (one per peer per take): they let go of the addresses they kept answering until it answered.",
		}),
		tookReceived: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_took_received_total",
			Help: "Took messages received from returning peers, before gossip carried the same in their metadata.",
		}),
		suspectSent: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_suspect_notices_sent_total",
			Help: "Suspect notices this member sent its peers (one per peer) when its probe of a member failed: each peer checks that member's node at once.",
		}),
		suspectReceived: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_suspect_notices_received_total",
			Help: "Suspect notices received from peers whose probe of a member failed; this member then checked that member's node at once (its own check decides).",
		}),
		ringFailed: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_ring_pings_failed_total",
			Help: "Pings of this member's successor in name order (one per probe interval) that got no ack in the probe timeout: each queued a kernel check of that node and told the other members, as a failed probe of memberlist's own.",
		}),
		earlyDistrusted: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_early_failures_distrusted_total",
			Help: "Failed probes whose node check got no answer that were NOT taken as a death, because this agent itself had not run on time (a stall, CPU starvation) or the check ran late: gossip's suspicion decided.",
		}),
		early: f.NewCounter(prometheus.CounterOpts{
			Name: "mooring_members_failures_confirmed_early_total",
			Help: "Members dropped as soon as this member's probe of them failed, because their node did not answer ARP/NDP either (without waiting for gossip's suspicion timeout); also counted in mooring_members_failures_total.",
		}),
		insecure: f.NewGauge(prometheus.GaugeOpts{
			Name: "mooring_members_insecure",
			Help: "1 while this member gossips without a key: anyone who reaches its gossip port can join, claim a node's name and spread false deaths (mooring doctor reports it).",
		}),
	}
}
