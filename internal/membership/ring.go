package membership

import (
	"context"
	"errors"
	"net"
	"slices"
	"time"

	"github.com/hashicorp/memberlist"
)

// The ring watch: memberlist probes one random member per ProbeInterval,
// from a list it shuffles each round, so with three members the next probe
// of a dead one comes up to three intervals (~600 ms) after its death, and
// that wait is most of a takeover's tail (docs/l2.md, docs/benchmarks.md).
// So besides memberlist's probes, every member with a kernel check pings
// its successor — the next live member after itself in name order,
// wrapping — once every RingInterval, with memberlist's own ping
// (encrypted like all gossip; the ack is memberlist's). Every member is
// then pinged directly at least once per interval while the members agree
// on who is live, at the cost of one ping and one ack per member per
// interval, whatever the cluster's size. A ping that gets no ack within
// ProbeTimeout is a failed probe like memberlist's own (suspect.go): it
// queues this member's kernel check and tells the other members, under the
// same guard and pace; it never drops anybody by itself.

// ringLoop pings this member's successor every RingInterval until ctx ends.
// Without a NodeCheck it does nothing: a failed ping alone proves nothing
// gossip would not find itself.
func (m *Membership) ringLoop(ctx context.Context, ml *memberlist.Memberlist) {
	if m.cfg.NodeCheck == nil || m.cfg.RingInterval < 0 {
		return
	}
	tick := time.NewTicker(m.cfg.RingInterval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		name, where := m.successor()
		if name == "" {
			continue
		}
		to, err := net.ResolveUDPAddr("udp", where)
		if err != nil {
			continue
		}
		// Ping waits up to ProbeTimeout, shorter than any interval.
		_, err = ml.Ping(name, to)
		var silent memberlist.NoPingResponseError
		switch {
		case errors.As(err, &silent):
			m.met.ringFailed.Inc()
			m.probeFailed(name)
		case err != nil:
			m.log.Debug("ring ping not sent; memberlist's own probes go on", "peer", name, "err", err)
		}
	}
}

// successor is the live member after this one in name order (wrapping),
// and its gossip address; "" when this member is alone.
func (m *Membership) successor() (name, where string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return successorOf(m.cfg.NodeName, m.live)
}

// successorOf is the name after self among live's names, wrapping, and its
// address; "" when live holds no other name.
func successorOf(self string, live map[string]string) (string, string) {
	names := make([]string, 0, len(live))
	for n := range live {
		if n != self {
			names = append(names, n)
		}
	}
	if len(names) == 0 {
		return "", ""
	}
	slices.Sort(names)
	i, _ := slices.BinarySearch(names, self) // the first name after self
	if i == len(names) {
		i = 0
	}
	return names[i], live[names[i]]
}
