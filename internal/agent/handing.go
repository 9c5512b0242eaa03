package agent

import (
	"net/netip"
	"slices"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/responder"
)

// Make before break (docs/l2.md "Hand-back"): when the decision gives one
// of this node's addresses to a returning peer that is still taking (it
// answers nothing until every serving peer confirmed, handoff.Returning),
// this node keeps answering for it until that peer took it: its took
// message (membership.Took) or its metadata clearing Taking. Letting go
// first left instants where nobody answered (~one gossip round); now the
// two may both answer for the moment between the peer's first answer and
// this node hearing of it (one datagram, milliseconds), both forwarding to
// the same Service. A peer that never takes (dies, is no longer counted)
// ends the hand-over at once, the decision deciding afresh; one that stays
// taking longer than TakeMaxWait ends it too (logged, counted), so a lost
// message and lost gossip cannot leave two responders.

// handing is an address this node still answers for while its new owner,
// a returning peer, takes it.
type handing struct {
	to    string
	since time.Time
}

// handOver reports whether the change of c's address away from this node
// (prev: what the responder answers on) waits for its new owner to take
// it, and if so records it.
func (a *Agent) handOver(c announce.Change, prev, now []int) bool {
	if h, ok := a.loop.handing[c.Addr]; ok {
		if len(now) == 0 && c.To == h.to && a.elig.Counts(h.to) {
			return true // still the same hand-over
		}
		delete(a.loop.handing, c.Addr)
	}
	if len(now) > 0 || len(prev) == 0 || c.To == "" || c.To == a.cfg.NodeName || !a.elig.Counts(c.To) {
		return false
	}
	if a.loop.handing == nil {
		a.loop.handing = map[netip.Addr]handing{}
	}
	a.loop.handing[c.Addr] = handing{to: c.To, since: a.deps.Clock.Now()}
	a.loop.handingStarted = true
	a.met.handOvers.Inc()
	return true
}

// handedOver ends the hand-overs whose new owner took the address, is no
// longer taking, or took longer than TakeMaxWait, and returns what the
// responder must change for them: what the decision says now.
func (a *Agent) handedOver() []responder.Change {
	var out []responder.Change
	for addr, h := range a.loop.handing {
		expired := a.deps.Clock.Since(h.since) > a.cfg.TakeMaxWait
		if a.elig.Counts(h.to) && !expired {
			continue
		}
		if expired {
			a.met.handOverExpired.Inc()
			a.log.Warn("a returning peer has not taken an address it was handed within the maximum wait: letting it go", "addr", addr, "peer", h.to, "waited", a.cfg.TakeMaxWait)
		}
		delete(a.loop.handing, addr)
		out = append(out, a.converge(addr)...)
	}
	return out
}

// converge returns what the responder must change so that it answers for
// addr on exactly the interfaces of the decision's local entries, and
// records it.
func (a *Agent) converge(addr netip.Addr) []responder.Change {
	var out []responder.Change
	prev := a.loop.answered[addr]
	var now []int
	for _, e := range a.loop.state.Local(addr) {
		now = append(now, e.IfIndex)
	}
	for _, i := range prev {
		if !slices.Contains(now, i) {
			out = append(out, responder.Change{IfIndex: i, Addr: addr})
		}
	}
	for _, i := range now {
		if !slices.Contains(prev, i) {
			out = append(out, responder.Change{IfIndex: i, Addr: addr, On: true})
		}
	}
	if now == nil {
		delete(a.loop.answered, addr)
	} else {
		a.loop.answered[addr] = now
	}
	return out
}
