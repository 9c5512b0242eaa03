//go:build linux

// Command mooring-ipam is Mooring's CNI IPAM plugin; see internal/cni.
//
// The plugin is a process per CNI call, so its start and exit are part of
// every pod start (docs/benchmarks.md, "CNI ADD p99"). The runtime's
// cgroup-aware GOMAXPROCS re-reads the cgroup from a background goroutine
// and names every memory mapping; a process that lives a few milliseconds
// needs neither.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
//go:debug decoratemappings=0
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"

	"github.com/mooringlb/mooring/internal/buildinfo"
	"github.com/mooringlb/mooring/internal/cni"
)

func main() {
	// After ADD and DEL, skel checks that CNI_NETNS is not the plugin's
	// own network namespace, to stop a main plugin from configuring the
	// host. An IPAM plugin never enters a namespace, so the check guards
	// nothing here, and it costs a thread (LockOSThread), two opens and
	// two fstats per call.
	_ = os.Setenv("CNI_NETNS_OVERRIDE", "1")
	skel.PluginMainFuncs(cni.Funcs(), cni.Versions, "mooring-ipam "+buildinfo.Version)
}
