package responder

import (
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync/atomic"
	"time"

	"k8s.io/utils/clock"
)

// link is one open interface. owned is swapped whole by Run's goroutine and
// read by the two reader goroutines; groups is touched only by Run's.
type link struct {
	*Link
	met    *metrics
	clock  clock.Clock
	log    *slog.Logger
	owned  atomic.Pointer[map[netip.Addr]struct{}]
	groups map[[6]byte]struct{}
	closed atomic.Bool
}

func newLink(pl *Link, met *metrics, clk clock.Clock, log *slog.Logger) *link {
	l := &link{Link: pl, met: met, clock: clk, log: log.With("interface", pl.Name), groups: map[[6]byte]struct{}{}}
	empty := map[netip.Addr]struct{}{}
	l.owned.Store(&empty)
	return l
}

func (l *link) owns(a netip.Addr) bool {
	_, ok := (*l.owned.Load())[a]
	return ok
}

// setOwned installs the new table of this interface, fixes the solicited-node
// group memberships and returns the addresses that are newly owned, sorted.
// Groups are joined before the table is installed, so no solicitation is
// missed for lack of a membership after we start answering.
func (l *link) setOwned(next map[netip.Addr]struct{}) []netip.Addr {
	prev := *l.owned.Load()
	want := map[[6]byte]struct{}{}
	for a := range next {
		if a.Is6() {
			if mac, err := SolicitedNodeMAC(a); err == nil {
				want[[6]byte(mac)] = struct{}{}
			}
		}
	}
	for g := range want {
		if _, ok := l.groups[g]; ok {
			continue
		}
		if err := l.NDP.JoinGroup(net.HardwareAddr(g[:])); err != nil {
			l.met.errors.WithLabelValues("join").Inc()
			l.log.Error("cannot join solicited-node group; multicast solicitations may be filtered by the NIC",
				"group", net.HardwareAddr(g[:]).String(), "err", err)
			continue
		}
		l.groups[g] = struct{}{}
	}
	l.owned.Store(&next)
	for g := range l.groups {
		if _, ok := want[g]; !ok {
			_ = l.NDP.LeaveGroup(net.HardwareAddr(g[:]))
			delete(l.groups, g)
		}
	}
	var added []netip.Addr
	for a := range next {
		if _, ok := prev[a]; !ok {
			added = append(added, a)
		}
	}
	slices.SortFunc(added, netip.Addr.Compare)
	return added
}

// announce sends one round of gratuitous frames for a: both ARP forms for
// IPv4, one unsolicited NA for IPv6.
func (l *link) announce(a netip.Addr) {
	var frames [][]byte
	var err error
	conn, fam := l.ARP, familyIPv4
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
		return
	}
	for _, f := range frames {
		if _, err := conn.WriteTo(f, hwAddr(f)); err != nil {
			l.met.errors.WithLabelValues("write").Inc()
			l.log.Warn("cannot send announcement", "addr", a, "err", err)
			continue
		}
		l.met.gratuitous.WithLabelValues(fam, l.Name).Inc()
	}
}

// handler is HandleARP or HandleNDP.
type handler func(frame []byte, ifMAC net.HardwareAddr, owns Owns) ([]byte, Verdict)

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
		reply, v := handle(buf[:n], l.MAC, l.owns)
		if v == Ignored {
			continue
		}
		l.met.requests.WithLabelValues(fam, l.Name, boolLabel(v == Answer)).Inc()
		if v != Answer {
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
