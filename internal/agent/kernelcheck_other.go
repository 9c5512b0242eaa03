//go:build !linux

package agent

import (
	"context"
	"net/netip"
	"time"

	"github.com/mooringlb/mooring/internal/membership"
)

func kernelCheck(time.Duration) membership.NodeCheck {
	return func(context.Context, netip.Addr) (bool, error) { return false, errUnsupported }
}
