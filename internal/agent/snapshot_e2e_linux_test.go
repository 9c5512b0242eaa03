//go:build linux

package agent_test

import (
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	mooringv1 "github.com/mooringlb/mooring/api/v1alpha1"
)

// The local snapshot (issue 9, item 6): with the API server stopped, an
// agent restarted on the owner's node answers ARP again from its snapshot.
// Gossip still rules: its peer, alive and serving, takes the address when
// the owner leaves, and the owner, back, holds down before taking it back,
// never with two responders. Then both agents stop and one starts alone,
// still without an API server: it serves every address from its snapshot.
func TestE2ERestartWithAPIServerDownServesFromSnapshot(t *testing.T) {
	c := newCluster(t, 2, nil)
	c.policy("all", mooringv1.L2AnnouncementPolicySpec{})
	vip := netip.MustParseAddr("10.213.0.170")
	c.service("snap", nil, false, vip.String())
	state := map[string]string{}
	for _, n := range c.lab.Nodes() {
		state[n.Name] = filepath.Join(c.dir, n.Name+"-state")
	}
	start := func(name string) {
		c.startAgent(c.lab.Host(name), "--state-dir", state[name], "--snapshot-wait", "2s")
	}
	for _, n := range c.lab.Nodes() {
		start(n.Name)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.dumpLogs()
		}
	})
	two := []string{"node-1", "node-2"}
	own := owner(vip, two...)
	other := two[0]
	if other == own {
		other = two[1]
	}
	c.waitResponders(vip, []string{own}, 20*time.Second)
	for _, n := range two {
		waitFor(t, 10*time.Second, n+" writes its snapshot", func() (bool, string) {
			_, err := os.Stat(filepath.Join(state[n], "l2-snapshot.json.gz"))
			return err == nil, err2s(err, 0)
		})
	}
	if body := c.waitReadyz(c.lab.Host(own), 10*time.Second); !strings.Contains(body, "live API state") {
		t.Fatalf("%s /readyz while the API server runs: %q", own, body)
	}

	c.stopAPIServer()
	stopAudit := c.startAudit(vip)
	c.terminate(c.lab.Host(own))
	c.waitResponders(vip, []string{other}, 5*time.Second) // left gossip: the peer takes over at once
	start(own)
	body := c.waitReadyz(c.lab.Host(own), 20*time.Second)
	if !strings.Contains(body, "local snapshot") {
		t.Fatalf("%s /readyz after a restart without API server: %q, want it to say it serves from the snapshot", own, body)
	}
	// Hold-down (3 s), then it takes its address back.
	c.waitResponders(vip, []string{own}, 15*time.Second)
	res := stopAudit()
	if len(res.double) > 0 {
		t.Fatalf("two responders during the restart: %v (%s)", res.double, res)
	}
	t.Logf("SNAPSHOT: restart of the owner without API server: %s", res)

	// Everything down but one agent, API server still away: it serves from
	// its snapshot alone, after the settle timeout.
	c.terminate(c.lab.Host(own))
	c.terminate(c.lab.Host(other))
	c.waitResponders(vip, nil, 5*time.Second)
	start(other)
	c.waitResponders(vip, []string{other}, 20*time.Second)
	// Alone it is not ready (gossip reaches nobody) but says it serves.
	if _, body, err := c.get(c.lab.Host(other), "/readyz"); err != nil || !strings.Contains(body, "serving from the local snapshot") {
		t.Fatalf("%s /readyz alone: %q, %v", other, body, err)
	}
}
