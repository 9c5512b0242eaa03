//go:build !linux

package host

import "net"

func (Links) Inspect() ([]LinkInfo, error) { return nil, errUnsupported }

// NeighbourMACs needs Linux.
func (Links) NeighbourMACs(int) ([]net.HardwareAddr, error) { return nil, errUnsupported }
