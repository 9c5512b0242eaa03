package bgpagent

import (
	"net/netip"
	"slices"
	"time"

	"github.com/mooringlb/mooring/internal/bgp"
)

// Forgetter forgets the node's stale conntrack entries of addresses
// (conntrack.Table): ESTABLISHED TCP entries to an address of idle that
// have been idle for at least its duration.
type Forgetter interface {
	Forget(idle map[netip.Addr]time.Duration) (int, error)
}

// goneKept bounds how long a withdrawal is remembered: kube-proxy's
// ESTABLISHED conntrack timeout (24 h), after which its stale entries
// have expired by themselves.
const goneKept = 24 * time.Hour

// returnSlack is how long after a withdrawal a flow may still reach the
// node (the router's convergence): entries that saw a packet only that
// much later are still taken for stale.
const returnSlack = time.Second

// returns remembers when each address left the node's advertisement, so
// that when it is advertised again the node's conntrack entries left over
// from before can be forgotten (internal/conntrack says why).
type returns struct {
	cur, next []netip.Addr // sorted; next is scratch
	gone      map[netip.Addr]time.Time
	// order is every withdrawal in the order it was made: gone's entries
	// expire from its front (an address withdrawn again or back since has
	// a later or no entry in gone and is skipped), so an update's pruning
	// costs what it removes, not a scan of every withdrawn address.
	order   []withdrawal
	started bool
}

// withdrawal is one entry of returns.order.
type withdrawal struct {
	addr netip.Addr
	at   time.Time
}

// prune forgets the withdrawals older than goneKept at now.
func (r *returns) prune(now time.Time) {
	i := 0
	for ; i < len(r.order) && now.Sub(r.order[i].at) > goneKept; i++ {
		if w := r.order[i]; r.gone[w.addr] == w.at {
			delete(r.gone, w.addr)
		}
	}
	r.order = r.order[i:]
}

// compact drops order's entries that gone no longer holds once they are
// more than half of it (an address flapping for a day would otherwise
// leave one entry per withdrawal until they expire): amortised O(1) per
// withdrawal.
func (r *returns) compact() {
	if len(r.order) > 2*len(r.gone)+64 {
		r.order = slices.DeleteFunc(r.order, func(w withdrawal) bool { return r.gone[w.addr] != w.at })
	}
}

// update takes what nr advertises at now and returns every address
// advertised again since the last update, with when it was withdrawn.
// The first update after a start returns nothing: what the node
// advertised before it is not known (graceful restart kept it advertised).
func (r *returns) update(now time.Time, nr bgp.NodeResult) map[netip.Addr]time.Time {
	r.next = hostAddrs(r.next[:0], nr)
	if r.gone == nil {
		r.gone = map[netip.Addr]time.Time{}
	}
	r.prune(now)
	var back map[netip.Addr]time.Time
	if r.started {
		i, j := 0, 0
		for i < len(r.cur) || j < len(r.next) {
			switch {
			case j == len(r.next) || i < len(r.cur) && r.cur[i].Less(r.next[j]):
				r.gone[r.cur[i]] = now // withdrawn
				r.order = append(r.order, withdrawal{r.cur[i], now})
				i++
			case i == len(r.cur) || r.next[j].Less(r.cur[i]):
				if at, ok := r.gone[r.next[j]]; ok { // advertised again
					if back == nil {
						back = map[netip.Addr]time.Time{}
					}
					back[r.next[j]] = at
					delete(r.gone, r.next[j])
				}
				j++
			default:
				i, j = i+1, j+1
			}
		}
	}
	r.compact()
	r.cur, r.next, r.started = r.next, r.cur, true
	return back
}

// hostAddrs appends the addresses nr advertises as host routes on its
// open sessions to dst, sorted and without duplicates. An aggregate is
// left out: its members are not known here. Each session's routes are
// sorted by address (bgp.Session.Routes), so with one session, or sessions
// that carry the same host routes (a node's two ToRs), the result is
// sorted without sorting: O(routes); sessions that differ cost a sort.
func hostAddrs(dst []netip.Addr, nr bgp.NodeResult) []netip.Addr {
	var prev []netip.Addr // the last session's addresses that differed
	sorted := len(dst) == 0
	for _, s := range nr.Sessions {
		if s.Blocked != "" {
			continue
		}
		start := len(dst)
		for _, rt := range s.Routes {
			if rt.Prefix.IsSingleIP() {
				dst = append(dst, rt.Prefix.Addr())
			}
		}
		switch seg := dst[start:]; {
		case len(seg) == 0:
		case prev == nil:
			prev = seg
		case slices.Equal(prev, seg):
			dst = dst[:start]
		default:
			sorted, prev = false, seg
		}
	}
	if !sorted {
		slices.SortFunc(dst, netip.Addr.Compare)
	}
	return slices.Compact(dst)
}

// forgetReturning forgets the node's stale conntrack entries of every
// address nr advertises again (before the speaker sends the route: no new
// flow can have reached the node for it yet), in one pass over the table.
func (b *Backend) forgetReturning(nr bgp.NodeResult) {
	if b.d.Conntrack == nil {
		return
	}
	now := b.d.Now()
	back := b.returns.update(now, nr)
	if len(back) == 0 {
		return
	}
	idle := make(map[netip.Addr]time.Duration, len(back))
	for addr, at := range back {
		idle[addr] = max(time.Second, now.Sub(at)-returnSlack)
	}
	n, err := b.d.Conntrack.Forget(idle)
	if err != nil {
		b.d.Log.Warn("BGP: forgetting stale conntrack entries of addresses advertised again", "addresses", len(idle), "err", err)
	}
	if n > 0 {
		b.forgotten.Add(float64(n))
		b.d.Log.Info("BGP: forgot stale conntrack entries of addresses advertised again", "addresses", len(idle), "entries", n)
	}
}
