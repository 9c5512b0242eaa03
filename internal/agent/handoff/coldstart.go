package handoff

import (
	"time"

	"github.com/mooringlb/mooring/internal/membership"
)

// ColdStartWindow is how long after its start an agent still starting
// counts, for its peers, as part of a cold start (a candidate for
// everything it may serve), provided no peer served before it started.
const ColdStartWindow = 10 * time.Second

// coldStartSlack is how much later than a peer's readiness an agent may
// start and still be part of the same cold start (agents of a new cluster
// start seconds apart; CI saw more than 1 s), and how much earlier than
// ColdStartWindow an agent's first decision takes itself for a returning
// one, so that a peer's clock a little ahead does not stop counting it
// while it takes at once.
const coldStartSlack = 2 * time.Second

// ServedBefore returns a member other than self that is ready and became
// ready more than coldStartSlack before born (Unix ms): a node born then
// comes into a cluster that has served without it (its addresses are
// answered by that peer), not a cold start. Every agent decides this from
// the same published values — the starting node about itself
// (Returning), its peers about it (StartingCandidate) — so the two never
// disagree on whom it concerns. An older agent publishes its readiness in
// seconds only (Since).
func ServedBefore(self string, born int64, members []membership.Member) (string, bool) {
	for _, m := range members {
		if m.Name == self || m.MetaErr != nil || !m.Meta.Ready || m.Meta.Leaving {
			continue
		}
		if at := readyAt(m.Meta); at > 0 && at < born-coldStartSlack.Milliseconds() {
			return m.Name, true
		}
	}
	return "", false
}

// readyAt is when m's agent became ready, in Unix ms (0: unknown).
func readyAt(m membership.NodeMeta) int64 {
	switch {
	case m.ReadyAt > 0:
		return m.ReadyAt
	case m.Since > 0:
		return m.Since * 1000
	}
	return 0
}

// StartingCandidate reports whether peer, which publishes that it is
// still starting, counts as a candidate for every address at wall: it
// started under ColdStartWindow ago and no member served before it
// started, so it will take at once when ready (a cold start: counting
// only the ready agents would move addresses as each becomes ready). A
// peer that comes into a cluster serving without it holds down first
// (Returning): counting it would hand its addresses to a node that
// answers nothing. ok is false when peer publishes no start time (an
// older agent): the caller judges by its own age.
func StartingCandidate(peer membership.Member, members []membership.Member, wall time.Time) (candidate, ok bool) {
	born := peer.Meta.Born
	if born == 0 {
		return false, false
	}
	if wall.UnixMilli()-born >= ColdStartWindow.Milliseconds() {
		return false, true
	}
	_, served := ServedBefore(peer.Name, born, members)
	return !served, true
}
