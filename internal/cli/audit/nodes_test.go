package audit

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/mooringlb/mooring/internal/arpprobe"
	"github.com/mooringlb/mooring/internal/lab"
)

func mac(s string) net.HardwareAddr {
	m, err := net.ParseMAC(s)
	if err != nil {
		panic(err)
	}
	return m
}

type staticMACs struct {
	m     map[string]string
	err   error
	asked *int
}

func (s staticMACs) NodeMACs(context.Context) (map[string]string, error) {
	if s.asked != nil {
		*s.asked++
	}
	return s.m, s.err
}

func TestNameMACsOrder(t *testing.T) {
	a, b := mac("02:00:00:00:00:0a"), mac("02:00:00:00:00:0b")
	var third int
	names, err := nameMACs(context.Background(), []net.HardwareAddr{a, b},
		staticMACs{err: lab.ErrNoLab}, // no lab: skipped quietly
		staticMACs{m: map[string]string{a.String(): "node-1"}},
		staticMACs{m: map[string]string{a.String(): "other", b.String(): "node-2"}, err: errors.New("half")},
		staticMACs{m: map[string]string{b.String(): "late"}, asked: &third},
	)
	if names[a.String()] != "node-1" || names[b.String()] != "node-2" {
		t.Errorf("first name wins: %v", names)
	}
	if err == nil || !strings.Contains(err.Error(), "half") {
		t.Errorf("a failing source is reported: %v", err)
	}
	if third != 0 {
		t.Error("sources after every MAC is named must not be asked")
	}
}

// The lab's state.json, as `mooring lab up` writes it, names every
// namespace's MAC; a state whose process is gone is no lab.
func TestLabMACs(t *testing.T) {
	dir := t.TempDir()
	write := func(pid int) {
		st := lab.State{PID: pid, Dir: dir, Hosts: []lab.HostState{
			{Name: "node-1", Role: "node", MAC: "02:6d:00:00:00:0b"},
			{Name: "client", Role: "client", MAC: "02:6D:00:00:00:64"},
		}}
		b, err := json.Marshal(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(os.Getpid())
	got, err := LabMACs{Dir: dir}.NodeMACs(context.Background())
	if err != nil || got["02:6d:00:00:00:0b"] != "node-1" || got["02:6d:00:00:00:64"] != "client" {
		t.Fatalf("lab names: %v, %v", got, err)
	}
	write(1 << 30) // no such process
	if _, err := (LabMACs{Dir: dir}).NodeMACs(context.Background()); !errors.Is(err, lab.ErrNoLab) {
		t.Errorf("dead lab: want ErrNoLab, got %v", err)
	}
}

func node(name string, addrs ...corev1.NodeAddress) *corev1.Node {
	return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Addresses: addrs}}
}

// APIMACs asks only for the InternalIPs of other machines; its own
// address maps to its own MAC without a probe.
func TestAPIMACsUnit(t *testing.T) {
	cs := fake.NewClientset(
		node("node-1", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.11"}, corev1.NodeAddress{Type: corev1.NodeExternalIP, Address: "198.51.100.1"}),
		node("node-2", corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "192.0.2.12"}, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: "2001:db8::12"}),
	)
	var asked []netip.Addr
	src := APIMACs{Client: cs, Local: []netip.Addr{netip.MustParseAddr("192.0.2.12")}, LocalMAC: mac("02:00:00:00:00:12"),
		Probe: func(_ context.Context, addrs []netip.Addr) (arpprobe.Result, error) {
			asked = addrs
			return arpprobe.Result{netip.MustParseAddr("192.0.2.11"): {mac("02:00:00:00:00:11")}}, nil
		}}
	got, err := src.NodeMACs(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got["02:00:00:00:00:11"] != "node-1" || got["02:00:00:00:00:12"] != "node-2" || len(got) != 2 {
		t.Errorf("names: %v", got)
	}
	for _, a := range asked {
		if a.String() == "198.51.100.1" || a.String() == "192.0.2.12" {
			t.Errorf("probed %s: not another Node's InternalIP", a)
		}
	}
	if len(asked) != 2 {
		t.Errorf("want node-1's and node-2's IPv6 address probed, got %v", asked)
	}
}
