//go:build !linux

package lab

import (
	"context"
	"errors"
)

var errLinux = errors.New("lab: the lab needs Linux network namespaces")

// Cluster is a running lab (Linux only).
type Cluster struct{}

// Run reports that the lab needs Linux.
func Run(context.Context, Config, func(*Ready)) error { return errLinux }

// Exec reports that the lab needs Linux.
func Exec(string, []string) error { return errLinux }

// Kill reports that the lab needs Linux.
func (*Cluster) Kill(string) error { return errLinux }

// Restore reports that the lab needs Linux.
func (*Cluster) Restore(string) error { return errLinux }

// ImportImage reports that the lab needs Linux.
func (*Cluster) ImportImage(context.Context, string) (string, error) { return "", errLinux }

// ChartValues is empty: the lab needs Linux.
func (*Cluster) ChartValues() []string { return nil }
