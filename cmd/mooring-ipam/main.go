// Command mooring-ipam is Mooring's CNI IPAM plugin; see internal/cni.
//
// The plugin is a process per CNI call, so its start and exit are part of
// every pod start. The runtime's cgroup-aware GOMAXPROCS reads four files
// at start and starts a goroutine that re-reads them; a process that lives
// a few milliseconds needs neither, nor the names on its memory mappings.
//
//go:debug containermaxprocs=0
//go:debug updatemaxprocs=0
//go:debug decoratemappings=0
package main

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/mooringlb/mooring/internal/buildinfo"
	"github.com/mooringlb/mooring/internal/cni"
)

func main() {
	skel.PluginMainFuncs(cni.Funcs(), cni.Versions, "mooring-ipam "+buildinfo.Version)
}
