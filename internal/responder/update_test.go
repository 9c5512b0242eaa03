package responder

import (
	"fmt"
	"maps"
	"math/rand"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clocktesting "k8s.io/utils/clock/testing"
)

// After any sequence of Applies and incremental Updates (coalesced or not,
// with interfaces failing to open now and then), the links answer exactly
// for the table a full recompute gives, hold exactly the solicited-node
// groups of their IPv6 addresses, and every newly owned address has its
// gratuitous series.
func TestUpdatesMatchTheFullTable(t *testing.T) {
	var universe []netip.Addr
	for i := 1; i <= 12; i++ {
		universe = append(universe, netip.MustParseAddr(fmt.Sprintf("10.0.0.%d", i)), netip.MustParseAddr(fmt.Sprintf("fd00::%x", i<<8|i)))
	}
	universe = append(universe, netip.MustParseAddr("::ffff:10.0.0.3"), netip.IPv4Unspecified(), netip.MustParseAddr("fe80::1%eth0"))
	for seed := range int64(5) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			r := rand.New(rand.NewSource(seed))
			fn := &fakeNet{links: map[int]*Link{}}
			m := NewWithOpener(Config{Clock: clocktesting.NewFakeClock(time.Unix(0, 0))}, nil, prometheus.NewRegistry(), fn.open)
			s := &runState{m: m, links: map[int]*link{}}
			defer s.closeAll()
			model := map[int]map[netip.Addr]struct{}{}
			set := func(ifindex int, a netip.Addr, on bool) {
				a = a.Unmap().WithZone("")
				if !valid(a) {
					return
				}
				if on {
					if model[ifindex] == nil {
						model[ifindex] = map[netip.Addr]struct{}{}
					}
					model[ifindex][a] = struct{}{}
				} else if delete(model[ifindex], a); len(model[ifindex]) == 0 {
					delete(model, ifindex)
				}
			}
			for step := range 1500 {
				if r.Intn(25) == 0 {
					table := map[int][]netip.Addr{}
					model = map[int]map[netip.Addr]struct{}{}
					for range r.Intn(20) {
						i, a := 1+r.Intn(3), universe[r.Intn(len(universe))]
						table[i] = append(table[i], a)
						set(i, a, true)
					}
					m.Apply(table)
				} else {
					var cs []Change
					for range 1 + r.Intn(4) {
						c := Change{IfIndex: 1 + r.Intn(3), Addr: universe[r.Intn(len(universe))], On: r.Intn(3) > 0}
						cs = append(cs, c)
						set(c.IfIndex, c.Addr, c.On)
					}
					m.Update(cs)
				}
				if r.Intn(3) > 0 {
					continue // coalesce with the next
				}
				before := answered(s)
				if r.Intn(15) == 0 {
					fn.fail = 1
				}
				s.converge()
				if fn.fail = 0; !s.retryAt.IsZero() {
					s.reconcile(m.table()) // Run's retry
				}
				got := answered(s)
				if !maps.EqualFunc(got, model, maps.Equal) {
					t.Fatalf("step %d: answering %v, want %v", step, got, model)
				}
				for ifindex := range s.links {
					var want []string
					for a := range got[ifindex] {
						if g, ok := solicitedGroup(a); ok {
							want = append(want, fmt.Sprint(g))
						}
					}
					ndp := fn.link(ifindex).NDP.(*fakeConn)
					ndp.mu.Lock()
					var joined []string
					for g := range ndp.groups {
						mac, _ := parseMAC(g)
						joined = append(joined, fmt.Sprint(mac))
					}
					ndp.mu.Unlock()
					slices.Sort(want)
					want = slices.Compact(want)
					slices.Sort(joined)
					if !slices.Equal(joined, want) {
						t.Fatalf("step %d: interface %d joined %v, want %v", step, ifindex, joined, want)
					}
					for a := range got[ifindex] {
						if _, had := before[ifindex][a]; !had && !slices.ContainsFunc(s.pending, func(p announcement) bool { return p.ifindex == ifindex && p.addr == a }) {
							t.Fatalf("step %d: %s newly owned on %d without a gratuitous series", step, a, ifindex)
						}
					}
				}
				for _, p := range s.pending {
					if _, ok := got[p.ifindex][p.addr]; !ok {
						t.Fatalf("step %d: a series for %s on %d, which is not owned", step, p.addr, p.ifindex)
					}
				}
			}
		})
	}
}

// answered is what the open links answer for.
func answered(s *runState) map[int]map[netip.Addr]struct{} {
	out := map[int]map[netip.Addr]struct{}{}
	for ifindex, l := range s.links {
		l.mu.RLock()
		out[ifindex] = maps.Clone(l.owned)
		l.mu.RUnlock()
	}
	return out
}

func parseMAC(s string) ([6]byte, error) {
	var b [6]byte
	_, err := fmt.Sscanf(s, "%02x:%02x:%02x:%02x:%02x:%02x", &b[0], &b[1], &b[2], &b[3], &b[4], &b[5])
	return b, err
}
