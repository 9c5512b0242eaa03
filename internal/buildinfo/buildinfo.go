// Package buildinfo says which Mooring this is.
package buildinfo

import "runtime/debug"

// Version is set at link time by the Makefile (-X); "dev" otherwise.
var Version = "dev"

// Revision is set at link time by builds that stamp no VCS information
// (`make image` builds with -buildvcs=false so that the binary does not
// depend on the work tree's state, and stamps the commit here instead).
var Revision = ""

// Commit returns the VCS revision the binary was built from, if known:
// Revision when stamped, else Go's VCS stamp.
func Commit() string {
	if Revision != "" {
		return Revision
	}
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
