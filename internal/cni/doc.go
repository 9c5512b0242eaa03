// Package cni is the mooring-ipam CNI plugin (spec 1.1: ADD, DEL, CHECK,
// GC, STATUS, VERSION). cmd/mooring-ipam only wires Funcs into skel.
//
// It runs in two roles, told apart by the config's top-level "type":
//
//   - as the IPAM plugin of a main plugin such as bridge or ptp
//     ("ipam": {"type": "mooring-ipam"}): ADD asks the node's agent for an
//     address per family and returns it with the block's gateway and a
//     default route per family; DEL and CHECK follow.
//   - as its own entry in a plugin list ({"type": "mooring-ipam"}): ADD,
//     DEL and CHECK pass the previous result through, and GC frees every
//     allocation not in cni.dev/valid-attachments. This entry exists
//     because the reference main plugins do not pass GC on to their IPAM
//     plugin; without it a runtime's GC would never reach the agent.
//
// The plugin holds no state: the agent (internal/ipamd) owns allocations.
// Its commands (plugin_linux.go) are Linux-only, as the CNI library's skel
// is; the config and DefaultSocket, which the agent's flags use, build
// anywhere.
package cni
