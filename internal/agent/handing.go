package agent

import (
	"bytes"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/mooringlb/mooring/internal/announce"
	"github.com/mooringlb/mooring/internal/responder"
)

// Make before break (docs/l2.md "Planned hand-offs"): when the decision
// gives one of this node's addresses to a returning peer that is still
// taking (it answers nothing until every serving peer confirmed,
// handoff.Returning), this node keeps answering for it until that peer
// took it: its took message (membership.Took) or its metadata clearing
// Taking. Meanwhile it answers with that peer's MAC where it can (claim),
// so that once the peer answers too both answers name the same MAC;
// letting go first left instants where nobody answered (~one gossip
// round). A peer that never takes (dies, is no longer counted) ends the
// hand-over at once, the decision deciding afresh; one that stays taking
// longer than TakeMaxWait ends it too (logged, counted), so a lost
// message and lost gossip cannot leave two responders.
//
// The other direction: a node that stops serving while it still could (a
// stopping agent, leave.go; its Node got the exclude label) publishes
// that it is no candidate only once it answers for each address with the
// MAC of the peer the address goes to; it answers so for LetGoWait, while
// that peer takes it, then lets go. On an interface where it has no such
// MAC it lets go at once, as before; a stopping agent keeps an address no
// peer can serve until it stops.

// handing is an address this node still answers for while its new owner,
// a returning peer, takes it.
type handing struct {
	to    string
	since time.Time
	// until ends a let-go hand-over (this node stops serving); zero for
	// a hand-over to a returning peer, which ends when it took.
	until time.Time
	// claimed are the interfaces on which this node answers with the new
	// owner's MAC (claim).
	claimed []int
}

// handOver reports whether the change of c's address away from this node
// (prev: what the responder answers on) waits for its new owner to take
// it, and if so records it and returns what the responder must change:
// answering with the new owner's MAC where it can (claim).
func (a *Agent) handOver(c announce.Change, prev, now []int) (bool, []responder.Change) {
	letGo := a.loop.lettingGo
	if h, ok := a.loop.handing[c.Addr]; ok {
		if len(now) == 0 && c.To == h.to && (a.elig.Counts(h.to) || letGo && !h.until.IsZero()) {
			return true, nil // still the same hand-over
		}
		delete(a.loop.handing, c.Addr)
	}
	if len(now) > 0 || len(prev) == 0 || c.To == a.cfg.NodeName {
		return false, nil
	}
	if a.loop.leaving && c.To == "" {
		return true, nil // no peer can serve it: answered until the agent stops
	}
	if c.To == "" || !letGo && !a.elig.Counts(c.To) {
		return false, nil
	}
	h := handing{to: c.To, since: a.deps.Clock.Now()}
	var out, unclaimed []responder.Change
	for _, i := range prev {
		if mac := a.claim(i, c.To); mac != nil {
			h.claimed = append(h.claimed, i)
			out = append(out, responder.Change{IfIndex: i, Addr: c.Addr, On: true, Claim: mac})
		} else {
			unclaimed = append(unclaimed, responder.Change{IfIndex: i, Addr: c.Addr})
		}
	}
	if letGo {
		if len(h.claimed) == 0 {
			return false, nil // no MAC to answer with anywhere: let go at once
		}
		out = append(out, unclaimed...) // nor on these interfaces
		h.until = h.since.Add(a.cfg.LetGoWait)
		a.loop.answered[c.Addr] = h.claimed
		a.met.letGo.Inc()
	} else {
		a.met.handOvers.Inc()
	}
	if a.loop.handing == nil {
		a.loop.handing = map[netip.Addr]handing{}
	}
	a.loop.handing[c.Addr] = h
	a.loop.handingStarted = true
	a.loop.handedTo, a.loop.handedN = c.To, a.loop.handedN+1
	if len(h.claimed) > 0 {
		a.loop.claimedN++
	}
	return true, out
}

// claim returns the MAC with which this node answers, on its interface
// ifindex, for an address it hands over to peer: the MAC peer publishes
// for the matching interface (eligibility.PeerMAC), provided this node's
// kernel has that MAC as a neighbour on ifindex (so it is reachable
// there); nil otherwise (answer with the own MAC).
func (a *Agent) claim(ifindex int, peer string) net.HardwareAddr {
	k := claimKey{ifindex, peer}
	if mac, ok := a.loop.claims[k]; ok {
		return mac // a hand-over of many addresses asks once per pass
	}
	if a.loop.claims == nil {
		a.loop.claims = map[claimKey]net.HardwareAddr{}
	}
	mac := a.lookupClaim(ifindex, peer)
	a.loop.claims[k] = mac
	return mac
}

// claimKey names a claim's interface and peer.
type claimKey struct {
	ifindex int
	peer    string
}

// lookupClaim is claim without the pass's cache.
func (a *Agent) lookupClaim(ifindex int, peer string) net.HardwareAddr {
	nb, ok := a.deps.Links.(interface {
		NeighbourMACs(ifindex int) ([]net.HardwareAddr, error)
	})
	if !ok {
		return nil
	}
	listen := a.loop.state.Listen()
	i := slices.IndexFunc(listen, func(f announce.Interface) bool { return f.Index == ifindex })
	if i < 0 {
		return nil
	}
	mac := a.elig.PeerMAC(peer, listen[i].Name)
	if mac == nil {
		return nil
	}
	macs, err := nb.NeighbourMACs(ifindex)
	if err != nil || !slices.ContainsFunc(macs, func(m net.HardwareAddr) bool { return bytes.Equal(m, mac) }) {
		return nil
	}
	return mac
}

// handedOver ends the hand-overs whose new owner took the address, is no
// longer taking, or took longer than TakeMaxWait, and returns what the
// responder must change for them: what the decision says now.
func (a *Agent) handedOver() []responder.Change {
	var out []responder.Change
	now := a.deps.Clock.Now()
	for addr, h := range a.loop.handing {
		if !h.until.IsZero() { // letting go: for LetGoWait, whatever the peer does
			if now.Before(h.until) && a.loop.lettingGo {
				continue
			}
			delete(a.loop.handing, addr)
			out = append(out, a.unclaim(addr, h.claimed)...)
			continue
		}
		expired := now.Sub(h.since) > a.cfg.TakeMaxWait
		if a.elig.Counts(h.to) && !expired {
			continue
		}
		if expired {
			a.met.handOverExpired.Inc()
			a.log.Warn("a returning peer has not taken an address it was handed within the maximum wait: letting it go", "addr", addr, "peer", h.to, "waited", a.cfg.TakeMaxWait)
		}
		delete(a.loop.handing, addr)
		out = append(out, a.unclaim(addr, h.claimed)...)
	}
	return out
}

// unclaim ends a hand-over of addr: what the responder must change to
// answer as the decision says now. Interfaces on which it answered with
// the new owner's MAC and still answers return to the own MAC and are
// announced again (clients may have learned the other MAC).
func (a *Agent) unclaim(addr netip.Addr, claimed []int) []responder.Change {
	out := a.converge(addr, a.localIfIndexes(addr))
	for _, i := range claimed {
		if slices.Contains(a.loop.answered[addr], i) {
			out = append(out, responder.Change{IfIndex: i, Addr: addr, On: true})
			a.loop.reannounce = append(a.loop.reannounce, responder.Change{IfIndex: i, Addr: addr})
		}
	}
	return out
}

// localIfIndexes are the interfaces of addr's local entries in the
// decision.
func (a *Agent) localIfIndexes(addr netip.Addr) []int {
	var out []int
	for _, e := range a.loop.state.Local(addr) {
		out = append(out, e.IfIndex)
	}
	return out
}

// converge returns what the responder must change so that it answers for
// addr on exactly the interfaces now (the decision's local entries), and
// records it.
func (a *Agent) converge(addr netip.Addr, now []int) []responder.Change {
	var out []responder.Change
	prev := a.loop.answered[addr]
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
