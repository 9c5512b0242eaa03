//go:build !linux

package memory

import "runtime/debug"

// releaseStartupMemory returns the heap start-up freed (elsewhere than
// Linux the binary's mappings are left alone).
func releaseStartupMemory() (uint64, error) {
	debug.FreeOSMemory()
	return 0, nil
}
