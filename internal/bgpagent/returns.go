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
	cur  hosts
	gone map[netip.Addr]time.Time
	// spare is an addresses array cur does not use, for the next update's
	// when it needs one of its own.
	spare []netip.Addr
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
	next := hostsOf(nr, r.spare[:0])
	if r.gone == nil {
		r.gone = map[netip.Addr]time.Time{}
	}
	r.prune(now)
	var back map[netip.Addr]time.Time
	if r.started {
		cur := r.cur
		nc, nn := cur.len(), next.len()
		i, j := 0, 0
		for i < nc || j < nn {
			var a, b netip.Addr // cur's i-th, next's j-th
			if i < nc {
				a = cur.at(i)
			}
			if j < nn {
				b = next.at(j)
			}
			switch {
			case j == nn || i < nc && a.Less(b):
				r.gone[a] = now // withdrawn
				r.order = append(r.order, withdrawal{a, now})
				i++
			case i == nc || b.Less(a):
				if at, ok := r.gone[b]; ok { // advertised again
					if back == nil {
						back = map[netip.Addr]time.Time{}
					}
					back[b] = at
					delete(r.gone, b)
				}
				j++
			default:
				i, j = i+1, j+1
			}
		}
	}
	r.compact()
	if next.addrs == nil || r.cur.addrs != nil {
		r.spare = r.cur.addrs // cur's array, free again (nil: keep none)
	} else {
		r.spare = nil // next took it
	}
	r.cur, r.started = next, true
	return back
}

// hosts are the addresses a node advertises as host routes on its open
// sessions, sorted and once each: the decision's own routes when they say
// it all — one open session, or open sessions that carry the same routes
// (a node's two ToRs), all host routes, sorted — which the backend keeps
// anyway as its last result, so at 10,000 addresses the tracking holds no
// array of its own (two of 10,000 addresses are 480 KB); else addresses
// of their own.
type hosts struct {
	routes []bgp.Route
	addrs  []netip.Addr
}

func (h hosts) len() int {
	if h.addrs != nil {
		return len(h.addrs)
	}
	return len(h.routes)
}

func (h hosts) at(i int) netip.Addr {
	if h.addrs != nil {
		return h.addrs[i]
	}
	return h.routes[i].Prefix.Addr()
}

// hostsOf is nr's hosts; when it needs addresses of its own it appends them
// to spare[:0].
func hostsOf(nr bgp.NodeResult, spare []netip.Addr) hosts {
	var first []bgp.Route
	open := false
	for _, s := range nr.Sessions {
		switch {
		case s.Blocked != "" || len(s.Routes) == 0:
		case !open:
			first, open = s.Routes, true
		case !samePrefixes(first, s.Routes):
			return hosts{addrs: hostAddrs(spare[:0], nr)}
		}
	}
	for i, rt := range first {
		if !rt.Prefix.IsSingleIP() || i > 0 && !first[i-1].Prefix.Addr().Less(rt.Prefix.Addr()) {
			return hosts{addrs: hostAddrs(spare[:0], nr)}
		}
	}
	return hosts{routes: first}
}

func samePrefixes(a, b []bgp.Route) bool {
	return slices.EqualFunc(a, b, func(x, y bgp.Route) bool { return x.Prefix == y.Prefix })
}

// hostAddrs appends the addresses nr advertises as host routes on its
// open sessions to dst, sorted and without duplicates. An aggregate is
// left out: its members are not known here. Each session's routes are
// sorted by address (bgp.Session.Routes), so with one session, or sessions
// that carry the same host routes (a node's two ToRs), the result is
// sorted without sorting: O(routes); sessions that differ cost a sort.
func hostAddrs(dst []netip.Addr, nr bgp.NodeResult) []netip.Addr {
	var prev []netip.Addr // the last session's addresses that differed
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
			prev = seg
		}
	}
	// Sorted already with one session's addresses, or sessions that agree
	// (bgp.Decide sorts each session's routes); the check costs O(n).
	if !slices.IsSortedFunc(dst, netip.Addr.Compare) {
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
