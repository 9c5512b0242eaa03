// Package buildinfo says which Mooring this is.
package buildinfo

import "runtime/debug"

// Version is set at link time by the Makefile (-X); "dev" otherwise.
var Version = "dev"

// Commit returns the VCS revision the binary was built from, if known.
func Commit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	for _, s := range info.Settings {
		if s.Key == "vcs.revision" {
			return s.Value
		}
	}
	return "unknown"
}
