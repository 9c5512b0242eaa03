//go:build !linux

package ipamd

import (
	"io"
	"net"
	"time"
)

// roundTrip sends req on a new connection to the unix socket and returns
// everything the agent writes back until it closes the connection.
func roundTrip(socket string, deadline time.Time, req []byte) ([]byte, error) {
	conn, err := net.DialTimeout("unix", socket, time.Until(deadline))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	if _, err := conn.Write(req); err != nil {
		return nil, err
	}
	return io.ReadAll(conn)
}
