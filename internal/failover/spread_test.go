package failover

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"
)

func ep(addr, node string, ready bool) Endpoint {
	return Endpoint{Addr: netip.MustParseAddr(addr), Node: node, Ready: ready}
}

func podEP(addr, node, pod string, ready bool) Endpoint {
	e := ep(addr, node, ready)
	e.Pod = pod
	return e
}

func TestCheckSpread(t *testing.T) {
	tests := []struct {
		name    string
		eps     []Endpoint
		wantErr string // "" for ok
	}{
		{"two nodes", []Endpoint{ep("10.1.0.1", "a", true), ep("10.1.0.2", "b", true)}, ""},
		{"three nodes, one not ready", []Endpoint{ep("10.1.0.1", "a", true), ep("10.1.0.2", "b", false), ep("10.1.0.3", "c", true)}, ""},
		{"none", nil, "no ready backend"},
		{"none ready", []Endpoint{ep("10.1.0.1", "a", false), ep("10.1.0.2", "b", false)}, "no ready backend (2 backends in"},
		{"both on one node (seed 002, failure 4)", []Endpoint{ep("10.1.0.1", "a", true), ep("10.1.0.2", "a", true)}, "all 2 ready backends are on node a"},
		{"second node not ready", []Endpoint{ep("10.1.0.1", "a", true), ep("10.1.0.2", "b", false)}, "the only ready backend is on node a"},
		// Issue 8 item 15: a dual-stack pod has an endpoint per family
		// and is one backend.
		{"one dual-stack pod ready", []Endpoint{podEP("10.1.0.1", "a", "d/echo-1", true), podEP("fd00::1", "a", "d/echo-1", true),
			podEP("10.1.0.2", "b", "d/echo-2", false), podEP("fd00::2", "b", "d/echo-2", false)}, "the only ready backend is on node a"},
		{"two dual-stack pods on one node", []Endpoint{podEP("10.1.0.1", "a", "d/echo-1", true), podEP("fd00::1", "a", "d/echo-1", true),
			podEP("10.1.0.2", "a", "d/echo-2", true), podEP("fd00::2", "a", "d/echo-2", true)}, "all 2 ready backends are on node a"},
		{"no node names", []Endpoint{ep("10.1.0.1", "", true), ep("10.1.0.2", "a", true)}, "1 with no nodeName"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckSpread(tt.eps)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrNotSpread) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want ErrNotSpread with %q", err, tt.wantErr)
			}
		})
	}
}

func TestNodeEndpointsGone(t *testing.T) {
	eps := []Endpoint{ep("10.1.0.1", "a", true), ep("10.1.0.2", "b", false), ep("10.1.0.3", "c", true)}
	for node, want := range map[string]bool{"a": false, "b": true, "c": false, "d": true} {
		if got := NodeEndpointsGone(eps, node); got != want {
			t.Errorf("NodeEndpointsGone(%s) = %v, want %v", node, got, want)
		}
	}
}

func TestNodeMACs(t *testing.T) {
	m1, err := ParseNodeMAC("node-a=02:00:00:00:00:0a")
	if err != nil {
		t.Fatal(err)
	}
	macs := NodeMACs{m1, {Node: "node-b", MAC: net.HardwareAddr{2, 0, 0, 0, 0, 0xb}}}
	if got := macs.Node(net.HardwareAddr{2, 0, 0, 0, 0, 0xa}); got != "node-a" {
		t.Errorf("Node = %q", got)
	}
	if got := macs.Node(nil); got != "" {
		t.Errorf("Node(nil) = %q", got)
	}
	for _, bad := range []string{"node-a", "=02:00:00:00:00:0a", "node-a=zz"} {
		if _, err := ParseNodeMAC(bad); err == nil {
			t.Errorf("ParseNodeMAC(%q): want an error", bad)
		}
	}
}

func TestProbeOwner(t *testing.T) {
	a, b := net.HardwareAddr{2, 0, 0, 0, 0, 1}, net.HardwareAddr{2, 0, 0, 0, 0, 2}
	vip := netip.MustParseAddr("192.0.2.10")
	obs := func(macs ...net.HardwareAddr) OwnerObserver {
		return ProbeOwner(func(context.Context, netip.Addr) ([]net.HardwareAddr, error) { return macs, nil })
	}
	if mac, err := obs().Owner(context.Background(), vip); mac != nil || err != nil {
		t.Errorf("no answer: %v %v", mac, err)
	}
	if mac, err := obs(a).Owner(context.Background(), vip); !bytes.Equal(mac, a) || err != nil {
		t.Errorf("one answer: %v %v", mac, err)
	}
	if mac, err := obs(a, b).Owner(context.Background(), vip); !bytes.Equal(mac, a) || !errors.Is(err, ErrSeveralOwners) {
		t.Errorf("two answers: %v %v", mac, err)
	}
}
