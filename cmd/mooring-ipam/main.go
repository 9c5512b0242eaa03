// Command mooring-ipam is Mooring's CNI IPAM plugin; see internal/cni.
package main

import (
	"github.com/containernetworking/cni/pkg/skel"

	"github.com/mooringlb/mooring/internal/buildinfo"
	"github.com/mooringlb/mooring/internal/cni"
)

func main() {
	skel.PluginMainFuncs(cni.Funcs(), cni.Versions, "mooring-ipam "+buildinfo.Version)
}
