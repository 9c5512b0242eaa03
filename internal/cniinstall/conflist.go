package cniinstall

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// The network a node gets when the chart writes it (agent.cni.network).
const (
	// ConfListName sorts before most runtimes' and distributions' own
	// files: a runtime loading the first file of its folder loads this one.
	ConfListName = "10-mooring.conflist"
	NetworkName  = "mooring"
	// Bridge is the bridge plugin's bridge.
	Bridge = "cni0"
)

// Main plugins the conflist may name (the reference plugins).
const (
	NetworkPTP    = "ptp"
	NetworkBridge = "bridge"
)

// ConfList is the node's pod network: the main plugin (ptp or bridge) with
// mooring-ipam as its IPAM on the agent's socket, then mooring-ipam again
// as its own list entry, where a runtime's GC reaches the agent (bridge and
// ptp do not pass GC on).
func ConfList(network, socket string) ([]byte, error) {
	if socket == "" || socket[0] != '/' {
		return nil, fmt.Errorf("install-cni: --socket %q: the agent's --pod-ipam-socket, an absolute path on the host", socket)
	}
	ipam := map[string]any{"type": "mooring-ipam", "socket": socket}
	var main map[string]any
	switch network {
	case NetworkPTP:
		main = map[string]any{"type": "ptp", "ipam": ipam}
	case NetworkBridge:
		main = map[string]any{"type": "bridge", "bridge": Bridge, "isGateway": true, "hairpinMode": true, "ipam": ipam}
	default:
		return nil, fmt.Errorf("install-cni: --network %q: use %s or %s (the reference plugin in the node's CNI plugin folder), or leave it out and write the network yourself", network, NetworkPTP, NetworkBridge)
	}
	conf := map[string]any{"cniVersion": "1.1.0", "name": NetworkName, "plugins": []any{main, ipam}}
	b, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteConfList writes ConfList(network, socket) into dir as ConfListName,
// atomically (a runtime reading the folder meanwhile sees the old file or
// the new one), and returns its path.
func WriteConfList(dir, network, socket string) (string, error) {
	b, err := ConfList(network, socket)
	if err != nil {
		return "", err
	}
	return writeAtomic(dir, ConfListName, bytes.NewReader(b), 0o644)
}
