package announce

import (
	"reflect"
	"testing"
)

func TestStaleLocal(t *testing.T) {
	owners := []Owner{{Addr: ip("10.213.0.100"), Node: "node-2"}, {Addr: ip("fd00:213::64"), Node: "node-2"}}
	listen := []Interface{{Name: "eth0", Index: 2}}
	onLo := []LocalAddr{{Addr: ip("10.213.0.100"), IfIndex: 1, IfName: "lo"}, {Addr: ip("fd00:213::64"), IfIndex: 1, IfName: "lo"}}
	onIPVS := []LocalAddr{{Addr: ip("10.213.0.100"), IfIndex: 9, IfName: "kube-ipvs0"}, {Addr: ip("10.96.0.1"), IfIndex: 9, IfName: "kube-ipvs0"}}
	onEth0 := []LocalAddr{{Addr: ip("10.213.0.100"), IfIndex: 2, IfName: "eth0"}, {Addr: ip("fd00:213::64"), IfIndex: 2, IfName: "eth0"}}
	tests := []struct {
		name       string
		configured []LocalAddr
		arpIgnore  map[string]int
		want       []Stale
	}{
		{"kernel default: the trap", onLo, nil, []Stale{{Addr: ip("10.213.0.100"), On: "lo", Via: "eth0"}}},
		{"kube-ipvs0, only announced addresses count", onIPVS, map[string]int{"all": 0, "eth0": 0}, []Stale{{Addr: ip("10.213.0.100"), On: "kube-ipvs0", Via: "eth0"}}},
		{"arp_ignore=1 on all", onLo, map[string]int{"all": 1}, nil},
		{"arp_ignore=1 on the interface", onLo, map[string]int{"eth0": 1}, nil},
		{"arp_ignore=2 counts as restricted", onLo, map[string]int{"all": 2}, nil},
		{"on the segment interface itself: always, both families", onEth0, map[string]int{"all": 1},
			[]Stale{{Addr: ip("10.213.0.100"), On: "eth0", Via: "eth0"}, {Addr: ip("fd00:213::64"), On: "eth0", Via: "eth0"}}},
		{"not announced: ignored", []LocalAddr{{Addr: ip("10.213.0.5"), IfIndex: 1, IfName: "lo"}}, nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := StaleLocal(owners, tt.configured, listen, tt.arpIgnore); !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMoves(t *testing.T) {
	prev := []Owner{{Addr: ip("10.0.0.1"), Node: "a"}, {Addr: ip("10.0.0.2"), Node: "b"}, {Addr: ip("10.0.0.3"), Node: "c"}, {Addr: ip("10.0.0.5")}}
	next := []Owner{{Addr: ip("10.0.0.1"), Node: "a"}, {Addr: ip("10.0.0.2"), Node: "c"}, {Addr: ip("10.0.0.4"), Node: "a"}, {Addr: ip("10.0.0.5")}}
	want := []Move{{Addr: ip("10.0.0.2"), From: "b", To: "c"}, {Addr: ip("10.0.0.3"), From: "c"}, {Addr: ip("10.0.0.4"), To: "a"}}
	if got := Moves(prev, next); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
