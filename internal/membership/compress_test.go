package membership

import (
	"io"
	"log"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
)

// A member that compresses its messages (memberlist's default, and
// Mooring's before it turned LZW off) and one that does not understand
// each other: they join, stay members through 3 s of probes both ways,
// and the compressing one's probes of ours are answered.
func TestMixesWithACompressingMember(t *testing.T) {
	ms := startCluster(t, 1)
	c := memberlist.DefaultLANConfig()
	c.Name, c.BindAddr, c.BindPort, c.AdvertiseAddr = "old", "127.0.0.1", 0, "127.0.0.1"
	c.ProbeInterval, c.GossipInterval = 200*time.Millisecond, 100*time.Millisecond
	c.EnableCompression = true
	c.Logger = log.New(io.Discard, "", 0)
	old, err := memberlist.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = old.Shutdown() }()
	if _, err := old.Join([]string{ms[0].Addr()}); err != nil {
		t.Fatal(err)
	}
	both := func() bool {
		return slices.Contains(ms[0].Members(), "old") && old.NumMembers() == 2 && old.GetHealthScore() == 0
	}
	waitFor(t, 5*time.Second, "both members to see each other", both)
	for range 30 {
		time.Sleep(100 * time.Millisecond)
		if !both() {
			t.Fatalf("lost each other: Mooring's member sees %v, the compressing one %d members (health %d)",
				ms[0].Members(), old.NumMembers(), old.GetHealthScore())
		}
	}
}
