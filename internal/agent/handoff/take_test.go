package handoff

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/membership"
)

func ready(ifs ...string) membership.NodeMeta {
	return membership.NodeMeta{Ranking: announce.RankingVersion(), Ready: true, Interfaces: ifs, Defaults: ifs[:1]}
}

// A returning node takes its addresses once every ready peer confirms
// that it counts it, never before TakeDelay; after TakeMaxWait only when
// the peers left unconfirmed are older agents that cannot confirm. A peer
// that confirms takes but has not yet is waited for however long: it
// still answers for the addresses.
func TestTakeDecision(t *testing.T) {
	confirms := func(names ...string) membership.NodeMeta {
		m := ready("eth0")
		m.Confirms, m.Counted = true, names
		return m
	}
	older := ready("eth0") // ready, publishes no confirmations
	t0 := time.Unix(1e9, 0)
	takeAt, takeBy := t0.Add(500*time.Millisecond), t0.Add(5*time.Second)
	for _, tc := range []struct {
		name    string
		members []membership.Member
		now     time.Time
		awaited []string
		older   []string
		want    int
	}{
		{"every peer confirms", []membership.Member{
			{Name: "node-1", Meta: confirms("node-2")}, {Name: "node-2", Meta: ready("eth0")}, {Name: "node-3", Meta: confirms("node-2", "node-4")},
		}, takeAt, nil, nil, takeConfirmed},
		{"confirmed but before TakeDelay", []membership.Member{
			{Name: "node-1", Meta: confirms("node-2")},
		}, takeAt.Add(-time.Millisecond), nil, nil, takeWait},
		{"one peer lags", []membership.Member{
			{Name: "node-1", Meta: confirms("node-2")}, {Name: "node-3", Meta: confirms()},
		}, takeAt.Add(time.Second), []string{"node-3"}, nil, takeWait},
		{"one peer lags past the maximum wait: still waiting, never beside it", []membership.Member{
			{Name: "node-1", Meta: confirms("node-2")}, {Name: "node-3", Meta: confirms("node-4")},
		}, takeBy.Add(time.Hour), []string{"node-3"}, nil, takeWait},
		{"a lagging peer beside an older one past the maximum wait", []membership.Member{
			{Name: "node-1", Meta: older}, {Name: "node-3", Meta: confirms()},
		}, takeBy, []string{"node-3"}, []string{"node-1"}, takeWait},
		{"a peer without the field waits for the maximum", []membership.Member{
			{Name: "node-1", Meta: confirms("node-2")}, {Name: "node-3", Meta: older},
		}, takeBy.Add(-time.Millisecond), nil, []string{"node-3"}, takeWait},
		{"a peer without the field past the maximum", []membership.Member{
			{Name: "node-1", Meta: confirms("node-2")}, {Name: "node-3", Meta: older},
		}, takeBy, nil, []string{"node-3"}, takeUnconfirmed},
		{"an agent older than metadata too", []membership.Member{
			{Name: "node-1", MetaErr: membership.ErrNoMeta},
		}, takeBy, nil, []string{"node-1"}, takeUnconfirmed},
		{"unreadable metadata is awaited, past the maximum too", []membership.Member{
			{Name: "node-1", MetaErr: errors.New("garbage")},
		}, takeBy.Add(time.Hour), []string{"node-1"}, nil, takeWait},
		{"peers that serve nothing are not awaited", []membership.Member{
			{Name: "node-1", Meta: membership.NodeMeta{Reason: "holding down"}},
			{Name: "node-3", Meta: membership.NodeMeta{Ready: true, Leaving: true}},
			{Name: "node-4", Meta: membership.NodeMeta{Leaving: true}, MetaErr: membership.ErrNoMeta},
		}, takeAt, nil, nil, takeConfirmed},
		{"alone", nil, takeAt, nil, nil, takeConfirmed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			awaited, older := Unconfirmed("node-2", tc.members)
			if !slices.Equal(awaited, tc.awaited) || !slices.Equal(older, tc.older) {
				t.Fatalf("awaited %v and older %v, want %v and %v", awaited, older, tc.awaited, tc.older)
			}
			if got := takeDecision(tc.now, takeAt, takeBy, awaited, older); got != tc.want {
				t.Fatalf("decision %d, want %d", got, tc.want)
			}
		})
	}
}
