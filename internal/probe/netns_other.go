//go:build !linux

package probe

import (
	"context"
	"net/netip"

	corev1 "k8s.io/api/core/v1"
)

// Netns needs Linux.
type Netns struct{}

// Request implements Requester.
func (Netns) Request(context.Context, *corev1.Pod, netip.AddrPort) error { return errNoNetns }
