//go:build !linux

package netlab

import (
	"context"
	"net/netip"
)

// AttachHost reports ErrUnsupported.
func (*Lab) AttachHost(context.Context, string, int, map[string]string) (*Host, error) {
	return nil, ErrUnsupported
}

// Release does nothing.
func (*Host) Release() error { return nil }

// WorkerTID reports ErrUnsupported.
func (*Host) WorkerTID() (int, error) { return 0, ErrUnsupported }

// AttachBehind reports ErrUnsupported.
func (*Lab) AttachBehind(context.Context, string, *Host, netip.Prefix, netip.Prefix, map[string]string) (*Host, error) {
	return nil, ErrUnsupported
}
