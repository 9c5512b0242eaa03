//go:build linux

package conntrack

import (
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	ct "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
)

// Delete removes every entry of the calling thread's network namespace
// that m selects and returns how many it removed. An entry that expired
// between the dump and its deletion is not an error. Cost: one streamed
// dump of the table's entries of Via's families (memory: one receive
// buffer, whatever the table's size), a set lookup per entry (Matcher) and
// one request per deleted entry.
func Delete(m Match) (int, error) {
	if m.Empty() {
		return 0, nil
	}
	sel := m.Matcher()
	v4, v6 := sel.via.families()
	return deleteSelected(family(v4, v6), func(e entry) bool {
		return sel.Selects(e.orig.IP.DestinationAddress, e.reply.IP.SourceAddress, e.seenReply())
	})
}

// establishedSysctl holds the ESTABLISHED timeout, in seconds, of the
// reading thread's network namespace.
const establishedSysctl = "/proc/sys/net/netfilter/nf_conntrack_tcp_timeout_established"

// ForgetIdle removes the entries of the calling thread's network namespace
// that Idle{For: idle} selects, with the namespace's ESTABLISHED timeout,
// and returns how many it removed: one streamed dump per address family
// for every address. A namespace without connection tracking has none.
func ForgetIdle(idle map[netip.Addr]time.Duration) (int, error) {
	if len(idle) == 0 {
		return 0, nil
	}
	b, err := os.ReadFile(establishedSysctl)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil // no connection tracking here (nf_conntrack not loaded): nothing is pinned
	}
	if err != nil {
		return 0, fmt.Errorf("conntrack: %w", err)
	}
	secs, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("conntrack: %s: %w", establishedSysctl, err)
	}
	m := Idle{For: idle, Established: time.Duration(secs) * time.Second}
	v4, v6 := false, false
	for a := range idle {
		v4, v6 = v4 || a.Unmap().Is4(), v6 || a.Is6() && !a.Is4In6()
	}
	return deleteSelected(family(v4, v6), func(e entry) bool {
		return e.orig.Proto.Protocol == unix.IPPROTO_TCP &&
			m.Selects(e.tcpState == tcpEstablished, e.orig.IP.DestinationAddress, time.Duration(e.timeout)*time.Second)
	})
}

// tcpEstablished is conntrack's TCP_CONNTRACK_ESTABLISHED.
const tcpEstablished = 3

// deleteFlows deletes flows through c and returns how many it deleted; an
// entry that expired since it was read is not an error.
func deleteFlows(c *ct.Conn, flows []ct.Flow) (int, error) {
	n := 0
	var errs []error
	for _, f := range flows {
		switch err := c.Delete(f); {
		case err == nil:
			n++
		case errors.Is(err, unix.ENOENT):
		default:
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return n, fmt.Errorf("conntrack: deleting %d entries: %w", len(errs), errors.Join(errs...))
	}
	return n, nil
}
