//go:build linux

package agent_test

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Planned hand-offs (issue 9, item 6) under client traffic: a rolling
// restart of every agent (SIGTERM, new process, the next one once /readyz
// answers, as a DaemonSet rolling update does), then a drain of the owner
// (the exclude-from-external-load-balancers label) and its return. A client
// per family connects every 100 ms and an ARP/NDP audit samples the
// responders every 100 ms: no failed connection, never two responders.
func TestE2EHandOffRollingRestartAndDrain(t *testing.T) {
	f := newFailoverCluster(t, 100*time.Millisecond)
	c, v4, v6, rank, clients := f.cluster, f.v4, f.v6, f.rank, f.clients
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	servedBy := func(node string, within time.Duration) {
		t.Helper()
		for _, tl := range clients {
			tl.waitServedBy(t, node, within)
		}
	}
	servedBy(rank[0], 10*time.Second)
	failures := func(since time.Time) (n, all int) {
		for _, tl := range clients {
			for _, a := range tl.snapshot() {
				if a.at.After(since) {
					all++
					if !a.ok {
						n++
					}
				}
			}
		}
		return n, all
	}

	// Rolling restart.
	stopAudit := c.startAudit(v4, v6)
	start := time.Now()
	for _, n := range three {
		h := c.lab.Host(n)
		c.terminate(h)
		c.startAgent(h)
		c.waitReadyz(h, 30*time.Second)
	}
	// Every address back home, after the last node's hold-down.
	waitFor(t, 20*time.Second, rank[0]+" owns both addresses again", func() (bool, string) {
		v, err := c.scrape(c.lab.Host(rank[0]), "mooring_agent_addresses_owned")
		return err == nil && v == 2, err2s(err, v)
	})
	servedBy(rank[0], 10*time.Second)
	res := stopAudit()
	failed, all := failures(start)
	t.Logf("ROLLING RESTART: %d of %d requests failed (%v); ARP/NDP audit: %s", failed, all, time.Since(start).Round(time.Second), res)
	if failed > 0 || len(res.double) > 0 {
		t.Fatalf("rolling restart: %d failed requests, two responders in %v", failed, res.double)
	}

	// Drain and return of the owner.
	stopAudit = c.startAudit(v4, v6)
	start = time.Now()
	c.excludeLabel(rank[0], true)
	servedBy(rank[1], 10*time.Second)
	back := time.Now()
	c.excludeLabel(rank[0], false)
	for _, tl := range clients {
		tl.waitServedBy(t, rank[0], 20*time.Second)
	}
	returned := time.Since(back)
	res = stopAudit()
	failed, all = failures(start)
	t.Logf("DRAIN + RETURN: %d of %d requests failed; back home after %v (hold-down 3 s); ARP/NDP audit: %s",
		failed, all, returned.Round(100*time.Millisecond), res)
	if failed > 0 || len(res.double) > 0 {
		t.Fatalf("drain and return: %d failed requests, two responders in %v", failed, res.double)
	}
	if returned < 3*time.Second {
		t.Fatalf("the node took its addresses back %v after the label went: the 3 s hold-down was not respected", returned)
	}
}

// excludeLabel sets or removes node.kubernetes.io/exclude-from-external-load-balancers.
func (c *cluster) excludeLabel(node string, on bool) {
	c.t.Helper()
	patch := fmt.Sprintf(`{"metadata":{"labels":{%q:""}}}`, corev1.LabelNodeExcludeBalancers)
	if !on {
		patch = fmt.Sprintf(`{"metadata":{"labels":{%q:null}}}`, corev1.LabelNodeExcludeBalancers)
	}
	if _, err := c.env.Clientset.CoreV1().Nodes().Patch(c.ctx, node, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		c.t.Fatal(err)
	}
}
