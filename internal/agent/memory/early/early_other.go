//go:build !linux

// Package early advises the agent's binary MADV_RANDOM on Linux only.
package early
