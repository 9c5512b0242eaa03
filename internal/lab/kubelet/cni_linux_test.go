package kubelet

import (
	"net"
	"net/netip"
	"slices"
	"testing"

	current "github.com/containernetworking/cni/pkg/types/100"
)

// A pod's status lists IPv4 first, whatever order the plugin returned.
func TestResultAddrs(t *testing.T) {
	ipc := func(s string) *current.IPConfig {
		ip, n, _ := net.ParseCIDR(s)
		n.IP = ip
		return &current.IPConfig{Address: *n}
	}
	r := &current.Result{CNIVersion: "1.1.0", IPs: []*current.IPConfig{ipc("fd00:244::5/120"), ipc("10.244.1.5/24")}}
	got, err := resultAddrs(r)
	want := []netip.Addr{netip.MustParseAddr("10.244.1.5"), netip.MustParseAddr("fd00:244::5")}
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("resultAddrs = %v, %v; want %v", got, err, want)
	}
	if _, err := resultAddrs(&current.Result{CNIVersion: "1.1.0"}); err == nil {
		t.Fatal("a result without address was accepted")
	}
}
