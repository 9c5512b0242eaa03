package agent

import "testing"

func TestEvictionConfig(t *testing.T) {
	c := DefaultConfig()
	c.NodeName, c.InsecureGossip = "node-1", true
	c.FastEndpointEviction = true
	if err := c.Validate(); err != nil {
		t.Fatalf("defaults with eviction on: %v", err)
	}
	c.NodeCheckWait = 0
	if err := c.Validate(); err == nil {
		t.Error("eviction without the kernel check: accepted")
	}
	c = DefaultConfig()
	c.NodeName, c.InsecureGossip = "node-1", true
	for _, share := range []float64{0, -0.1, 1.5} {
		c.FastEvictionMaxShare = share
		if err := c.Validate(); err == nil {
			t.Errorf("--fast-eviction-max-share %v: accepted", share)
		}
	}
}
