//go:build !linux

package conntrack

import "errors"

// Delete needs Linux netfilter.
func Delete(Match) (int, error) {
	return 0, errors.New("conntrack: only on Linux")
}
