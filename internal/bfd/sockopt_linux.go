package bfd

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// reuseAddr lets the listener bind while an old socket of a restarted
// agent lingers.
func reuseAddr(c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEADDR, 1) }); err != nil {
		return err
	}
	return serr
}

// freeBind lets a sender bind to a source address not (yet) on the node.
func freeBind(c syscall.RawConn, v6 bool) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		if v6 {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IPV6, unix.IPV6_FREEBIND, 1)
		} else {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1)
		}
	})
	if err != nil {
		return err
	}
	return serr
}
