package conntrack

import (
	"net/netip"
	"testing"
	"time"
)

func TestIdleSelects(t *testing.T) {
	vip := netip.MustParseAddr("10.213.0.101")
	v6 := netip.MustParseAddr("fd00:213::101")
	m := Idle{For: map[netip.Addr]time.Duration{vip: 5 * time.Second, v6: time.Hour}, Established: 24 * time.Hour}
	left := func(idle time.Duration) time.Duration { return 24*time.Hour - idle }
	for _, tc := range []struct {
		name        string
		established bool
		dst         netip.Addr
		remaining   time.Duration
		want        bool
	}{
		{"idle since before the withdrawal", true, vip, left(6 * time.Second), true},
		{"idle exactly as long", true, vip, left(5 * time.Second), true},
		{"a packet since", true, vip, left(4 * time.Second), false},
		{"the address IPv4-mapped", true, netip.AddrFrom16(vip.As16()), left(time.Hour), true},
		{"another address", true, netip.MustParseAddr("10.213.0.102"), left(time.Hour), false},
		{"not ESTABLISHED (closing, or UDP: times out by itself)", false, vip, 0, false},
		{"another address's idle time", true, v6, left(30 * time.Minute), false},
		{"another address idle long enough", true, v6, left(time.Hour), true},
	} {
		if got := m.Selects(tc.established, tc.dst, tc.remaining); got != tc.want {
			t.Errorf("%s: Selects = %v, want %v", tc.name, got, tc.want)
		}
	}
}
