//go:build !linux

package lab

import "context"

// StartFault reports that the lab needs Linux.
func (c *Cluster) StartFault(context.Context, Fault) error { return errLinux }
