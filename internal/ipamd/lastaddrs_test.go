package ipamd

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
)

func addPod(t *testing.T, a *Allocator, id, pod string) Allocation {
	t.Helper()
	al, err := a.Add(context.Background(), AddRequest{Key: Key{Network: "pods", ContainerID: id, IfName: "eth0"}, Namespace: "default", Pod: pod})
	if err != nil {
		t.Fatalf("add %s (%s): %v", id, pod, err)
	}
	return al
}

func addrsOf(al Allocation) string { return fmt.Sprint(al.IPs) }

// A node reboot as containerd and the kubelet run it (lab kill/restore on
// real nodes): both pods' old sandboxes are deleted, then their new
// sandboxes are added in either order. Each pod gets its own addresses
// back; lowest-free alone swapped them (seen in TestRealNodesPodIPAM: run
// 4 of the first three runs). A pod's hint is a preference, not a
// reservation: another pod may take a freed address first, and the pod
// then gets the lowest free one.
func TestAllocatorPodGetsItsAddressesBack(t *testing.T) {
	a, st := open(t, t.TempDir())
	defer st.Close()
	one, two := addPod(t, a, "s1", "one"), addPod(t, a, "s2", "two")
	for _, k := range []Key{one.Key, two.Key} {
		if err := a.Del(k); err != nil {
			t.Fatal(err)
		}
	}
	if got := addPod(t, a, "s2b", "two"); addrsOf(got) != addrsOf(two) {
		t.Errorf("pod two's new sandbox got %v, had %v", got.IPs, two.IPs)
	}
	if got := addPod(t, a, "s1b", "one"); addrsOf(got) != addrsOf(one) {
		t.Errorf("pod one's new sandbox got %v, had %v", got.IPs, one.IPs)
	}
	// Taken by another pod meanwhile: the lowest free instead, no error.
	if err := a.Del(Key{Network: "pods", ContainerID: "s1b", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	other := addPod(t, a, "o1", "other")
	if addrsOf(other) != addrsOf(one) {
		t.Fatalf("a pod without a hint got %v, want the lowest free %v", other.IPs, one.IPs)
	}
	if got := addPod(t, a, "s1c", "one"); addrsOf(got) == addrsOf(one) || got.IPs[0].Address.Addr() != netip.MustParseAddr("10.244.1.4") {
		t.Errorf("pod one after its address was taken: %v, want the lowest free 10.244.1.4", got.IPs)
	}
}

// GC frees like DEL and leaves the same hints; a hint outside the pod's
// pool's blocks is not used.
func TestAllocatorHintsAfterGCAndRelease(t *testing.T) {
	a, st := open(t, t.TempDir())
	defer st.Close()
	addPod(t, a, "f1", "filler")
	p := addPod(t, a, "g1", "p")
	if _, err := a.GC("pods", []Key{{Network: "pods", ContainerID: "f1", IfName: "eth0"}}); err != nil {
		t.Fatal(err)
	}
	if got := addPod(t, a, "g2", "p"); addrsOf(got) != addrsOf(p) {
		t.Errorf("after GC: %v, had %v", got.IPs, p.IPs)
	}
	if err := a.Del(Key{Network: "pods", ContainerID: "g2", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	pools := dual()
	moved := pools["default"]
	moved.Blocks = []netip.Prefix{netip.MustParsePrefix("10.244.9.0/29"), netip.MustParsePrefix("fd00:9::/125")}
	pools["default"] = moved
	a.SetPools(pools)
	if got := addPod(t, a, "g3", "p"); got.IPs[0].Address.Addr() != netip.MustParseAddr("10.244.9.2") {
		t.Errorf("hint outside the blocks: %v, want the lowest free 10.244.9.2", got.IPs)
	}
}

// The hints are bounded: the oldest pod's goes first, and a pod put again
// counts once.
func TestLastAddrsBounded(t *testing.T) {
	l := newLastAddrs(3)
	ip := func(s string) []IP { return []IP{{Address: netip.MustParsePrefix(s)}} }
	for i := range 10 {
		l.put(Allocation{Key: Key{IfName: "eth0"}, Pod: "same", IPs: ip(fmt.Sprintf("10.0.0.%d/24", i+2))})
	}
	for i, p := range []string{"a", "b", "c"} {
		l.put(Allocation{Key: Key{IfName: "eth0"}, Pod: p, IPs: ip(fmt.Sprintf("10.0.1.%d/24", i+2))})
	}
	if len(l.hints) != 3 || l.get(podKey{pod: "same", ifName: "eth0"}) != nil || l.get(podKey{pod: "a", ifName: "eth0"}) == nil {
		t.Fatalf("hints %v", l.hints)
	}
	if len(l.order) > 2*l.max {
		t.Fatalf("order grew to %d", len(l.order))
	}
	l.put(Allocation{Key: Key{IfName: "eth0"}, Pod: "", IPs: ip("10.0.2.2/24")})
	if len(l.hints) != 3 {
		t.Fatalf("an allocation without a pod name was remembered: %v", l.hints)
	}
}
