//go:build linux

package conntrack

import (
	"errors"
	"fmt"

	ct "github.com/ti-mo/conntrack"
	"golang.org/x/sys/unix"
)

// Delete removes every entry of the calling thread's network namespace
// that m selects and returns how many it removed. An entry that expired
// between the dump and its deletion is not an error. Cost: one dump of the
// whole table (a node holds thousands of entries, not millions), a set
// lookup per entry (Matcher) and one request per deleted entry.
func Delete(m Match) (int, error) {
	if m.Empty() {
		return 0, nil
	}
	c, err := ct.Dial(nil)
	if err != nil {
		return 0, fmt.Errorf("conntrack: opening netlink: %w", err)
	}
	defer c.Close()
	flows, err := c.Dump(nil)
	if err != nil {
		return 0, fmt.Errorf("conntrack: listing entries: %w", err)
	}
	sel := m.Matcher()
	n := 0
	var errs []error
	for _, f := range flows {
		if !sel.Selects(f.TupleOrig.IP.DestinationAddress, f.TupleReply.IP.SourceAddress, f.Status.SeenReply()) {
			continue
		}
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
