package responder

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// link is one open interface. owned is changed by Run's goroutine and read
// by the two reader goroutines (under mu); groups is touched only by Run's.
type link struct {
	*Link
	met   *metrics
	clock clock.Clock
	log   *slog.Logger
	mu    sync.RWMutex
	owned map[netip.Addr]struct{}
	// claims are the owned addresses answered with another MAC than the
	// interface's own (Change.Claim), under mu.
	claims map[netip.Addr]net.HardwareAddr
	// groups counts the owned IPv6 addresses of each solicited-node group;
	// joined are the groups whose membership succeeded.
	groups map[[6]byte]int
	joined map[[6]byte]struct{}
	closed atomic.Bool
	silent func() bool // Config.Silent
}

func newLink(pl *Link, met *metrics, clk clock.Clock, log *slog.Logger) *link {
	return &link{Link: pl, met: met, clock: clk, log: log.With("interface", pl.Name),
		owned: map[netip.Addr]struct{}{}, groups: map[[6]byte]int{}, joined: map[[6]byte]struct{}{}}
}

func (l *link) owns(a netip.Addr) bool {
	l.mu.RLock()
	_, ok := l.owned[a]
	l.mu.RUnlock()
	return ok
}

// claimed reports whether a is owned and the MAC its answers name (nil:
// the interface's own): Claims for the readers.
func (l *link) claimed(a netip.Addr) (net.HardwareAddr, bool) {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if _, ok := l.owned[a]; !ok {
		return nil, false
	}
	return l.claims[a], true
}

// claim sets the MAC an owned a is answered with (nil: the interface's
// own).
func (l *link) claim(a netip.Addr, mac net.HardwareAddr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, ok := l.owned[a]; ok {
		l.setClaim(a, mac)
	}
}

// setClaim records a's claim (under mu held for writing).
func (l *link) setClaim(a netip.Addr, mac net.HardwareAddr) {
	if mac == nil {
		delete(l.claims, a)
		return
	}
	if l.claims == nil {
		l.claims = map[netip.Addr]net.HardwareAddr{}
	}
	l.claims[a] = mac
}

// size is how many addresses the link answers for.
func (l *link) size() int {
	l.mu.RLock()
	defer l.mu.RUnlock()
	return len(l.owned)
}

// setOwned makes next the table of this interface, answered with claims
// where given, and returns the addresses that are newly owned and
// answered with the interface's own MAC (to announce), sorted.
func (l *link) setOwned(next map[netip.Addr]struct{}, claims map[netip.Addr]net.HardwareAddr) []netip.Addr {
	l.mu.RLock()
	var gone []netip.Addr
	for a := range l.owned {
		if _, ok := next[a]; !ok {
			gone = append(gone, a)
		}
	}
	l.mu.RUnlock()
	for _, a := range gone {
		l.remove(a)
	}
	var added []netip.Addr
	for a := range next {
		if l.addClaimed(a, claims[a]) && claims[a] == nil {
			added = append(added, a)
		}
	}
	for g := range l.groups { // retry memberships that failed
		l.join(g)
	}
	slices.SortFunc(added, netip.Addr.Compare)
	return added
}

// add answers for a from now on and reports whether it is new. Its
// solicited-node group is joined first, so no solicitation is missed for
// lack of a membership after we start answering.
func (l *link) add(a netip.Addr) bool { return l.addClaimed(a, nil) }

// addClaimed is add answering with claim (nil: the interface's own MAC),
// set together with the address; an address already owned gets claim.
func (l *link) addClaimed(a netip.Addr, claim net.HardwareAddr) bool {
	if l.owns(a) {
		l.claim(a, claim)
		return false
	}
	if g, ok := solicitedGroup(a); ok {
		l.groups[g]++
		l.join(g)
	}
	l.mu.Lock()
	l.owned[a] = struct{}{}
	l.setClaim(a, claim)
	l.mu.Unlock()
	return true
}

// join joins g unless it is joined; a failure is retried by the next
// address of the group.
func (l *link) join(g [6]byte) {
	if _, ok := l.joined[g]; ok {
		return
	}
	if err := l.NDP.JoinGroup(net.HardwareAddr(g[:])); err != nil {
		l.met.errors.WithLabelValues("join").Inc()
		l.log.Error("cannot join solicited-node group; multicast solicitations may be filtered by the NIC",
			"group", net.HardwareAddr(g[:]).String(), "err", err)
		return
	}
	l.joined[g] = struct{}{}
}

// remove stops answering for a; the last address of a solicited-node
// group leaves the group.
func (l *link) remove(a netip.Addr) {
	if !l.owns(a) {
		return
	}
	l.mu.Lock()
	delete(l.owned, a)
	delete(l.claims, a)
	l.mu.Unlock()
	g, ok := solicitedGroup(a)
	if !ok {
		return
	}
	if l.groups[g]--; l.groups[g] > 0 {
		return
	}
	delete(l.groups, g)
	if _, ok := l.joined[g]; ok {
		_ = l.NDP.LeaveGroup(net.HardwareAddr(g[:]))
		delete(l.joined, g)
	}
}

// solicitedGroup is the solicited-node multicast MAC of an IPv6 address.
func solicitedGroup(a netip.Addr) ([6]byte, bool) {
	if !a.Is6() {
		return [6]byte{}, false
	}
	mac, err := SolicitedNodeMAC(a)
	if err != nil {
		return [6]byte{}, false
	}
	return [6]byte(mac), true
}

// announcement returns one round of gratuitous frames for a, and the
// connection and family they go out on: both ARP forms for IPv4, one
// unsolicited NA for IPv6. An address answered with another node's MAC (a
// hand-over) is not announced (nil): the node taking it does.
func (l *link) announcement(a netip.Addr) (frames [][]byte, conn GroupConn, fam string) {
	if mac, ok := l.claimed(a); !ok || mac != nil {
		return nil, nil, ""
	}
	var err error
	conn, fam = l.ARP, familyIPv4
	if a.Is4() {
		frames, err = GratuitousARP(l.MAC, a)
	} else {
		conn, fam = l.NDP, familyIPv6
		var f []byte
		f, err = UnsolicitedNA(l.MAC, a)
		frames = [][]byte{f}
	}
	if err != nil {
		l.log.Error("cannot build announcement", "addr", a, "err", err)
		return nil, nil, ""
	}
	return frames, conn, fam
}

// send writes one gratuitous frame for a (unless the agent is silent).
func (l *link) send(conn GroupConn, fam string, a netip.Addr, f []byte) {
	if l.silent != nil && l.silent() {
		return
	}
	if _, err := conn.WriteTo(f, hwAddr(f)); err != nil {
		l.met.errors.WithLabelValues("write").Inc()
		l.log.Warn("cannot send announcement", "addr", a, "err", err)
		return
	}
	l.met.gratuitous.WithLabelValues(fam, l.Name).Inc()
}

// handler is HandleARPClaims or HandleNDPClaims.
type handler func(frame []byte, ifMAC net.HardwareAddr, claims Claims) ([]byte, Verdict)

// serve reads frames from conn until the link is closed, answering requests
// for owned addresses.
func (l *link) serve(conn GroupConn, fam string, handle handler) {
	buf := make([]byte, 2048)
	failures := 0
	for {
		n, _, err := conn.ReadFrom(buf)
		if l.closed.Load() {
			return
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || errors.Is(err, os.ErrClosed) {
				return
			}
			// An interface going down makes reads fail until it is back
			// (or until Run closes us); don't spin on it.
			l.met.errors.WithLabelValues("read").Inc()
			if failures++; failures == 1 || failures%100 == 0 {
				l.log.Warn("read failed", "family", fam, "failures", failures, "err", err)
			}
			l.clock.Sleep(min(time.Duration(failures)*10*time.Millisecond, time.Second))
			continue
		}
		failures = 0
		reply, v := handle(buf[:n], l.MAC, l.claimed)
		if v == Ignored {
			continue
		}
		l.met.requests.WithLabelValues(fam, l.Name, boolLabel(v == Answer)).Inc()
		if v != Answer || (l.silent != nil && l.silent()) {
			continue
		}
		if _, err := conn.WriteTo(reply, hwAddr(reply)); err != nil {
			l.met.errors.WithLabelValues("write").Inc()
			l.log.Warn("cannot send reply", "family", fam, "err", err)
			continue
		}
		l.met.replies.WithLabelValues(fam, l.Name).Inc()
	}
}

// close stops the readers (their ReadFrom returns once the sockets close).
func (l *link) close() {
	l.closed.Store(true)
	_ = l.ARP.Close()
	_ = l.NDP.Close()
}

func boolLabel(b bool) string {
	if b {
		return "true"
	}
	return "false"
}
