//go:build !linux

package conntrack

import (
	"errors"
	"net/netip"
	"time"
)

// Delete needs Linux netfilter.
func Delete(Match) (int, error) {
	return 0, errors.New("conntrack: only on Linux")
}

// ForgetIdle needs Linux netfilter.
func ForgetIdle(map[netip.Addr]time.Duration) (int, error) {
	return 0, errors.New("conntrack: only on Linux")
}
