//go:build linux

package agent_test

import (
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Revoking a leaked gossip key on running agents (issue 19): four agents
// share key K1, each from its own key file (as each node mounts the
// Secret). The files of node-1..3 are rewritten to hold only K2, as an
// operator replaces a leaked key in use; node-4 (the holder of the leaked
// key) keeps K1. Without a restart, node-1..3 re-read their files (every
// 10 s), go on gossiping with each other under K2 and drop node-4, which
// can neither be heard nor join again. Were the file not reloaded, or a
// removed key still accepted, the survivors would keep four members.
func TestE2EGossipKeyRevokedWithoutRestart(t *testing.T) {
	c := newCluster(t, 4, nil)
	key := func(b byte) string {
		return base64.StdEncoding.EncodeToString([]byte(strings.Repeat(string(rune(b)), 32))) + "\n"
	}
	files := map[string]string{}
	for _, h := range c.lab.Nodes() {
		files[h.Name] = filepath.Join(c.dir, h.Name+".gossip.keys")
		if err := os.WriteFile(files[h.Name], []byte(key('1')), 0o600); err != nil {
			t.Fatal(err)
		}
		c.startAgent(h, "--gossip-key-file", files[h.Name])
	}
	live := func() string {
		var out []string
		for _, h := range c.lab.Nodes() {
			v, err := c.scrape(h, "mooring_members_live")
			if err != nil {
				return err.Error()
			}
			out = append(out, fmt.Sprint(v))
		}
		return strings.Join(out, ",")
	}
	waitFor(t, 30*time.Second, "four members on every agent (K1)", func() (bool, string) { m := live(); return m == "4,4,4,4", m })

	for _, n := range three {
		if err := os.WriteFile(files[n], []byte(key('2')), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	revoked := time.Now()
	waitFor(t, 60*time.Second, "node-1..3 gossip under K2 without node-4, node-4 alone", func() (bool, string) {
		m := live()
		return m == "3,3,3,1", m
	})
	t.Logf("the leaked key's holder out %v after the files changed", time.Since(revoked).Round(100*time.Millisecond))
	// node-4 keeps trying to join (its peers come from the Nodes): it
	// stays out.
	for range 5 {
		time.Sleep(time.Second)
		if m := live(); m != "3,3,3,1" {
			t.Fatalf("live members after the revocation: %s, want 3,3,3,1", m)
		}
	}
	for _, n := range three {
		b, _ := os.ReadFile(filepath.Join(c.dir, n+".log"))
		if !strings.Contains(string(b), "gossip keys reloaded") {
			t.Errorf("%s never logged a key reload", n)
		}
	}
}
