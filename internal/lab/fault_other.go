//go:build !linux

package lab

import "context"

// StartFault reports that the lab needs Linux.
func (c *Cluster) StartFault(context.Context, Fault) (string, error) { return "", errLinux }

// Down does nothing: the lab needs Linux.
func (c *Cluster) Down() {}
