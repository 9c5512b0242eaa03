//go:build !linux

package bgpspeaker

import (
	"context"
	"net/netip"
)

// KernelProber needs Linux; elsewhere it learns nothing.
type KernelProber struct{}

// Probe implements Prober.
func (KernelProber) Probe(context.Context, netip.Addr, netip.Addr, uint16) ProbeResult {
	return ProbeNotRun
}

// Link implements Prober.
func (KernelProber) Link(netip.Addr) LinkState { return LinkUnknown }
