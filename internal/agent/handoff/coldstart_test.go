package handoff

import (
	"testing"
	"time"

	"github.com/mooringlb/mooring/internal/membership"
)

func TestServedBeforeAndStartingCandidate(t *testing.T) {
	const born = int64(1_000_000_000_000) // Unix ms
	ready := func(name string, at int64) membership.Member {
		return membership.Member{Name: name, Meta: membership.NodeMeta{Ready: true, Since: at / 1000, ReadyAt: at}}
	}
	older := func(name string, sinceS int64) membership.Member { // publishes seconds only
		return membership.Member{Name: name, Meta: membership.NodeMeta{Ready: true, Since: sinceS}}
	}
	self := membership.Member{Name: "x", Meta: membership.NodeMeta{Reason: "starting", Born: born}}
	leaving := ready("l", born-5000)
	leaving.Meta.Ready, leaving.Meta.Leaving = false, true
	for _, tc := range []struct {
		name    string
		members []membership.Member
		served  string
	}{
		{name: "alone", members: []membership.Member{self}},
		{name: "a peer ready 2,001 ms before", members: []membership.Member{self, ready("p", born-2001)}, served: "p"},
		{name: "a peer ready 2 s before (the same cold start)", members: []membership.Member{self, ready("p", born-2000)}},
		{name: "a peer ready 1 ms before", members: []membership.Member{self, ready("p", born-1)}},
		{name: "a peer ready after", members: []membership.Member{self, ready("p", born+1)}},
		{name: "a peer not ready", members: []membership.Member{self, {Name: "p", Meta: membership.NodeMeta{Since: 1, ReadyAt: 1}}}},
		{name: "a leaving peer", members: []membership.Member{self, leaving}},
		{name: "an unreadable peer", members: []membership.Member{self, {Name: "p", MetaErr: membership.ErrNoMeta}}},
		{name: "itself ready before (its last life)", members: []membership.Member{ready("x", born-5000)}},
		{name: "an older peer, 3 s before", members: []membership.Member{self, older("p", born/1000-3)}, served: "p"},
		{name: "an older peer, 2 s before (its slack)", members: []membership.Member{self, older("p", born/1000-2)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := ServedBefore("x", born, tc.members)
			if got != tc.served || ok != (tc.served != "") {
				t.Fatalf("ServedBefore = %q, %v; want %q", got, ok, tc.served)
			}
			cand, known := StartingCandidate(self, tc.members, time.UnixMilli(born).Add(time.Second))
			if !known || cand != (tc.served == "") {
				t.Fatalf("StartingCandidate = %v, %v; want %v, true", cand, known, tc.served == "")
			}
		})
	}
	if cand, known := StartingCandidate(self, nil, time.UnixMilli(born).Add(ColdStartWindow)); cand || !known {
		t.Fatalf("past the window: StartingCandidate = %v, %v; want false, true", cand, known)
	}
	if _, known := StartingCandidate(membership.Member{Name: "old", Meta: membership.NodeMeta{Reason: "starting"}}, nil, time.Now()); known {
		t.Fatal("a peer without Born: the caller must judge")
	}
}
