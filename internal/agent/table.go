package agent

import (
	"net/netip"
	"slices"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/responder"
)

// applyToResponder gives the responder the whole table once, then only the
// addresses that changed.
func (a *Agent) applyToResponder(changes []announce.Change) {
	if !a.loop.applied {
		a.applyAll()
	} else if up := a.responderUpdates(changes); len(up) > 0 {
		a.deps.Responder.Update(up)
	}
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
}

// responderUpdates turns changes into what the responder must start and
// stop answering: every change of local entries is a Change (announce),
// so only those addresses are looked at. Cost: O(changes).
func (a *Agent) responderUpdates(changes []announce.Change) []responder.Change {
	var out []responder.Change
	for _, c := range changes {
		prev := a.loop.answered[c.Addr]
		var now []int
		for _, e := range a.loop.state.Local(c.Addr) {
			now = append(now, e.IfIndex)
		}
		if slices.Equal(prev, now) {
			continue
		}
		for _, i := range prev {
			if !slices.Contains(now, i) {
				out = append(out, responder.Change{IfIndex: i, Addr: c.Addr})
			}
		}
		for _, i := range now {
			if !slices.Contains(prev, i) {
				out = append(out, responder.Change{IfIndex: i, Addr: c.Addr, On: true})
			}
		}
		if now == nil {
			delete(a.loop.answered, c.Addr)
		} else {
			a.loop.answered[c.Addr] = now
		}
	}
	return out
}
