package netlab

import (
	"net/netip"
	"testing"
)

func TestConfigPlan(t *testing.T) {
	cfg := Config{Nodes: 2, Subnet4: netip.MustParsePrefix("192.168.4.0/22")}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	got := cfg.withDefaults().plan()
	want := []hostSpec{
		{"node-1", netip.MustParseAddr("192.168.4.11"), netip.MustParseAddr("fd00:213::b"), nil},
		{"node-2", netip.MustParseAddr("192.168.4.12"), netip.MustParseAddr("fd00:213::c"), nil},
		{"client", netip.MustParseAddr("192.168.4.250"), netip.MustParseAddr("fd00:213::fa"), nil},
	}
	if len(got) != len(want) {
		t.Fatalf("plan = %v, want %v", got, want)
	}
	for i := range want {
		if got[i].name != want[i].name || got[i].addr4 != want[i].addr4 || got[i].addr6 != want[i].addr6 {
			t.Errorf("plan[%d] = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestConfigValidateRejects(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Nodes: MaxNodes + 1},
		{Nodes: 1, Subnet4: netip.MustParsePrefix("10.0.0.0/25")},
		{Nodes: 1, Subnet4: netip.MustParsePrefix("10.0.0.1/24")},
		{Nodes: 1, Subnet6: netip.MustParsePrefix("10.0.0.0/24")},
		{Nodes: 1, Bridge: "a-very-long-bridge-name"},
		{Nodes: 1, NodeSysctls: map[string]string{"kernel.pid_max": "1"}},
		{Nodes: 1, ClientSysctls: map[string]string{"net.ipv4/../../kernel/x": "1"}},
	} {
		if err := cfg.Validate(); err == nil {
			t.Errorf("Validate(%+v) = nil, want an error", cfg)
		}
	}
}
