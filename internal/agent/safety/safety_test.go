package safety

import (
	"net"
	"slices"
	"testing"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
	"github.com/mooringlb/mooring/internal/announce"
)

// TestSplitChangesReannounce: a split that begins or ends triggers one
// re-announce of that address; rounds where nothing changes trigger none.
func TestSplitChangesReannounce(t *testing.T) {
	vip, other := agenttest.IP("10.213.0.100"), agenttest.IP("10.213.0.101")
	local := []announce.Entry{{Addr: vip, IfIndex: 2, IfName: "eth0"}, {Addr: other, IfIndex: 2, IfName: "eth0"}}
	stale := conflict{addr: vip, ifindex: 2, ifname: "eth0", macs: []net.HardwareAddr{{2, 0, 0, 0, 0, 9}}}
	split := map[probeTarget]bool{}
	round := func(found ...conflict) []probeTarget {
		m := map[string]conflict{}
		for _, c := range found {
			m[c.key()] = c
		}
		return splitChanges(split, local, local, m)
	}
	want := []probeTarget{{2, vip}}
	steps := []struct {
		name  string
		found []conflict
		want  []probeTarget
	}{
		{"clean", nil, nil},
		{"still clean", nil, nil},
		{"split detected", []conflict{stale}, want},
		{"split persists", []conflict{stale}, nil},
		{"split persists again", []conflict{stale}, nil},
		{"split ended", nil, want},
		{"clean after the end", nil, nil},
		{"clean once more", nil, nil},
	}
	for _, s := range steps {
		if got := round(s.found...); !slices.Equal(got, s.want) {
			t.Errorf("%s: re-announce %v, want %v", s.name, got, s.want)
		}
	}

	// A target outside this round's batch keeps its state (rounds rotate
	// over large tables); one no longer announced is forgotten.
	round(stale)
	if got := splitChanges(split, local, local[1:], nil); len(got) != 0 || !split[probeTarget{2, vip}] {
		t.Errorf("unprobed split changed: %v, state %v", got, split)
	}
	if splitChanges(split, local[1:], local[1:], nil); len(split) != 0 {
		t.Errorf("split state of a released address kept: %v", split)
	}
}
