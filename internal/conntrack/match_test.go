package conntrack

import (
	"net/netip"
	"testing"
)

func TestMatchSelects(t *testing.T) {
	a := netip.MustParseAddr
	m := Match{To: []netip.Addr{a("10.213.0.120"), a("fd00:213::78")},
		Via: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.MustParsePrefix("fd00:244:0:2::/64")}}
	for _, tc := range []struct {
		dst, reply string
		want       bool
	}{
		{"10.213.0.120", "10.244.2.7", true},        // the address, DNATed to the dead node
		{"fd00:213::78", "fd00:244:0:2::9", true},   // IPv6 alike
		{"::ffff:10.213.0.120", "10.244.2.7", true}, // v4-mapped in either field
		{"10.213.0.120", "10.244.3.7", false},       // a live node's endpoint
		{"10.213.0.121", "10.244.2.7", false},       // another address
		{"10.244.2.7", "10.244.2.7", false},         // not translated: no Service traffic
		{"10.213.0.120", "", false},                 // incomplete entry
	} {
		var reply netip.Addr
		if tc.reply != "" {
			reply = a(tc.reply)
		}
		if got := m.Selects(a(tc.dst), reply, false); got != tc.want {
			t.Errorf("Selects(%s, %s) = %v, want %v", tc.dst, tc.reply, got, tc.want)
		}
	}
	if !m.Selects(a("10.213.0.120"), a("10.244.2.7"), true) {
		t.Error("a Match without Unreplied must select an entry that has seen a reply")
	}
	m.Unreplied = true
	if m.Selects(a("10.213.0.120"), a("10.244.2.7"), true) || !m.Selects(a("10.213.0.120"), a("10.244.2.7"), false) {
		t.Error("Unreplied must select only entries that have seen no reply")
	}
	any := Match{Via: m.Via}
	if !any.Selects(a("10.96.0.10"), a("10.244.2.7"), false) {
		t.Error("a Match without To must select a translation to Via from any address")
	}
	if !(Match{}).Empty() || m.Empty() {
		t.Error("Empty")
	}
}
