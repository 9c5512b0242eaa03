//go:build !linux

package bgpspeaker

import (
	"errors"
	"net/netip"
	"syscall"
)

// md5Control refuses to dial with a password: TCP-MD5 needs Linux.
func md5Control(_ netip.Addr, password string) func(network, address string, c syscall.RawConn) error {
	if password == "" {
		return nil
	}
	return func(string, string, syscall.RawConn) error { return errors.New("TCP-MD5 needs Linux") }
}
