package conntrack

import (
	"net/netip"
	"time"
)

// Table is the conntrack table of the calling thread's network namespace,
// as internal/bgpagent uses it.
type Table struct{}

// Forget is ForgetIdle.
func (Table) Forget(idle map[netip.Addr]time.Duration) (int, error) { return ForgetIdle(idle) }
