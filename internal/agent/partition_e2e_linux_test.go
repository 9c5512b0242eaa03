//go:build linux

package agent_test

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
	"github.com/mooringlb/mooring/internal/netlab"
)

// respondersAll probes every address at once (one probe each, in
// parallel) and returns the responders by address; an address whose probe
// failed is missing.
func (c *cluster) respondersAll(addrs []netip.Addr, wait time.Duration) map[netip.Addr][]string {
	var mu sync.Mutex
	out := map[netip.Addr][]string{}
	var wg sync.WaitGroup
	for _, a := range addrs {
		wg.Go(func() {
			macs, err := netlab.Probe(c.ctx, c.lab.Client(), a, wait)
			if err != nil {
				return
			}
			var names []string
			for _, m := range macs {
				names = append(names, c.nodeByMAC(m.String()))
			}
			slices.Sort(names)
			mu.Lock()
			out[a] = names
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// waitPartitionSettled waits until every address is answered by its owner
// among side alone, probing all of them together every ~200 ms, and
// returns the time from cut to the first round that saw it.
func (c *cluster) waitPartitionSettled(vips []netip.Addr, side []string, cut time.Time, within time.Duration) time.Duration {
	c.t.Helper()
	var last map[netip.Addr][]string
	for time.Since(cut) < within {
		round := time.Now()
		last = c.respondersAll(vips, 150*time.Millisecond)
		ok := true
		for _, a := range vips {
			if !slices.Equal(last[a], []string{owner(a, side...)}) {
				ok = false
			}
		}
		if ok {
			return round.Sub(cut)
		}
		time.Sleep(50 * time.Millisecond)
	}
	c.t.Fatalf("no single responder from %v per address within %v of the cut: %v", side, within, last)
	return 0
}

// The benchmark form: -agent.bench.runs partitions with the API server,
// then as many without it, in one cluster.
func TestBenchPartition(t *testing.T) {
	requireBench(t)
	c, vips := partitionCluster(t, 170)
	var with, without []time.Duration
	for i := range *benchRuns {
		settled, res := c.partitionRun(vips, 12*time.Second)
		with = append(with, settled)
		t.Logf("with API server, run %d: one responder per address after %v; audit: %s", i+1, settled.Round(100*time.Millisecond), res)
	}
	c.stopAPIServer()
	for i := range *benchRuns {
		settled, res := c.partitionRun(vips, 12*time.Second)
		without = append(without, settled)
		t.Logf("without API server, run %d: one responder per address after %v; audit: %s", i+1, settled.Round(100*time.Millisecond), res)
	}
	m, w := stats(with)
	m2, w2 := stats(without)
	t.Logf("PARTITION: with the API server median %v worst %v; without median %v worst %v (n = %d each)",
		m.Round(100*time.Millisecond), w.Round(100*time.Millisecond), m2.Round(100*time.Millisecond), w2.Round(100*time.Millisecond), *benchRuns)
}

// partitionCluster runs three agents and six addresses from 10.213.0.<first>.
func partitionCluster(t *testing.T, first byte) (*cluster, []netip.Addr) {
	c := newCluster(t, 3, nil)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	var vips []netip.Addr
	for i := range 6 {
		a := netip.AddrFrom4([4]byte{10, 213, 0, first + byte(i)})
		vips = append(vips, a)
		c.service(fmt.Sprintf("part-%d", i), nil, false, a.String())
	}
	c.startAgents()
	for _, a := range vips {
		c.waitResponders(a, []string{owner(a, three...)}, 20*time.Second)
	}
	return c, vips
}

// partitionRun cuts gossip between node-1 and the others, waits for one
// responder per address among node-2 and node-3 (auditing for two
// responders meanwhile and for 2 s more), heals the cut and waits for the
// original owners.
func (c *cluster) partitionRun(vips []netip.Addr, within time.Duration) (time.Duration, auditResult) {
	c.t.Helper()
	n1 := c.lab.Host("node-1")
	stop := c.startAudit(vips...)
	c.nft(n1, partitionRules)
	cut := time.Now()
	settled := c.waitPartitionSettled(vips, []string{"node-2", "node-3"}, cut, within)
	time.Sleep(2 * time.Second)
	res := stop()
	c.nft(n1, "delete table inet mooring_e2e_partition")
	for _, a := range vips {
		c.waitResponders(a, []string{owner(a, three...)}, 15*time.Second)
	}
	return settled, res
}

const partitionRules = `table inet mooring_e2e_partition {
  chain in { type filter hook input priority 0; udp dport 7946 drop; tcp dport 7946 drop; udp sport 7946 drop; tcp sport 7946 drop; }
  chain out { type filter hook output priority 0; udp dport 7946 drop; tcp dport 7946 drop; udp sport 7946 drop; tcp sport 7946 drop; }
}`
