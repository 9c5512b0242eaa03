//go:build tools

// Package tools pins the MetalLB commands this module builds, so that go mod
// tidy keeps their dependencies.
package tools

import (
	_ "go.universe.tf/metallb/controller"
	_ "go.universe.tf/metallb/speaker"
)
