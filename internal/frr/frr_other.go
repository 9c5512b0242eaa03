//go:build !linux

package frr

import (
	"context"

	"github.com/mooringlb/mooring/internal/netlab"
)

// Instance is a running router (Linux only).
type Instance struct {
	Client
}

// Check reports ErrUnsupported.
func Check() error { return ErrUnsupported }

// Start reports ErrUnsupported.
func Start(context.Context, *netlab.Host, string, Config) (*Instance, error) {
	return nil, ErrUnsupported
}

// LogTail returns "".
func (*Instance) LogTail(string, int) string { return "" }

// Stop does nothing.
func (*Instance) Stop() error { return nil }

// Kill reports ErrUnsupported.
func (*Instance) Kill() error { return ErrUnsupported }

// Pause reports ErrUnsupported.
func (*Instance) Pause(string) error { return ErrUnsupported }

// Resume reports ErrUnsupported.
func (*Instance) Resume(string) error { return ErrUnsupported }
