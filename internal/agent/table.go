package agent

import (
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/responder"
)

// applyToResponder gives the responder the whole table once, then only the
// addresses that changed and the hand-overs that ended (handing.go).
func (a *Agent) applyToResponder(changes []announce.Change) {
	if !a.loop.applied {
		a.applyAll()
		return
	}
	up := a.responderUpdates(changes)
	up = append(up, a.handedOver()...)
	if len(up) > 0 {
		a.deps.Responder.Update(up)
	}
	if re, ok := a.deps.Responder.(interface {
		Reannounce(ifindex int, addr netip.Addr)
	}); ok { // after the update: the address answers with the own MAC again
		for _, c := range a.loop.reannounce {
			re.Reannounce(c.IfIndex, c.Addr)
		}
	}
	a.loop.reannounce = a.loop.reannounce[:0]
}

// applyAll gives the responder the whole local table.
func (a *Agent) applyAll() {
	desired := a.loop.state.Desired()
	a.loop.answered = map[netip.Addr][]int{}
	for ifindex, addrs := range desired {
		for _, ad := range addrs {
			a.loop.answered[ad] = append(a.loop.answered[ad], ifindex)
		}
	}
	a.deps.Responder.Apply(desired)
	a.loop.applied = true
	a.loop.handing = nil
}

// responderUpdates turns changes into what the responder must start and
// stop answering: every change of local entries is a Change (announce),
// so only those addresses are looked at. Cost: O(changes).
func (a *Agent) responderUpdates(changes []announce.Change) []responder.Change {
	var out []responder.Change
	for _, c := range changes {
		prev, now := a.loop.answered[c.Addr], a.localIfIndexes(c.Addr)
		if h, ok := a.loop.handing[c.Addr]; ok && len(now) > 0 {
			delete(a.loop.handing, c.Addr) // this node's again: the hand-over ends
			out = append(out, a.unclaim(c.Addr, h.claimed)...)
			continue
		}
		if slices.Equal(prev, now) {
			continue
		}
		if handed, claims := a.handOver(c, prev, now); handed {
			out = append(out, claims...)
			continue
		}
		out = append(out, a.converge(c.Addr, now)...)
	}
	return out
}
