//go:build !linux

package responder

// openLink fails: AF_PACKET sockets exist only on Linux.
func openLink(int) (*Link, error) { return nil, ErrUnsupported }
