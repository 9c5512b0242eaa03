//go:build !linux

// Package early lowers the agent's start-up memory peak on Linux only.
package early
