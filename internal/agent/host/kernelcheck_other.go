//go:build !linux

package host

import (
	"context"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/membership"
)

func KernelCheck(time.Duration) membership.NodeCheck {
	return func(context.Context, netip.Addr) (bool, error) { return false, errUnsupported }
}
