// Package buildinfo says which Mooring this is.
package buildinfo

import (
	"runtime"
	"runtime/debug"
)

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

// Info is what every component reports about its build: `mooring version`,
// the components' /version endpoints and their build_info metrics say the
// same.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	GoVersion string `json:"goVersion"`
}

// Get returns this binary's Info.
func Get() Info {
	return Info{Version: Version, Commit: Commit(), GoVersion: runtime.Version()}
}

// Labels are Info as metric labels (version, commit, goversion), for a
// component's mooring_<component>_build_info gauge.
func (i Info) Labels() map[string]string {
	return map[string]string{"version": i.Version, "commit": i.Commit, "goversion": i.GoVersion}
}
