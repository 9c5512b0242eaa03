package netlab

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"testing"
)

// An attached host is on the bridge like the others, can be entered
// through its worker thread from another process, and Release takes its
// processes and namespace away.
func TestAttachHost(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 1})
	ctx := testCtx(t)
	h, err := l.AttachHost(ctx, "control-plane", 2, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.Addr4 != netip.MustParseAddr("10.213.0.2") || h.Addr6 != netip.MustParseAddr("fd00:213::2") ||
		h.MAC.String() != "02:6d:00:00:00:02" {
		t.Fatalf("attached host = %s %s %s", h.Addr4, h.Addr6, h.MAC)
	}
	for _, a := range []netip.Addr{h.Addr4, h.Addr6} {
		if err := Ping(ctx, l.Nodes()[0], a); err != nil {
			t.Errorf("node-1 cannot ping %s: %v", a, err)
		}
	}
	tid, err := h.WorkerTID()
	if err != nil {
		t.Fatal(err)
	}
	path := fmt.Sprintf("/proc/%d/task/%d/ns/net", os.Getpid(), tid)
	want, err := nsInode(path)
	if err != nil {
		t.Fatal(err)
	}
	if got := fdInode(t, int(h.NS())); got != want {
		t.Fatalf("%s is namespace %d, the host's is %d", path, want, got)
	}
	p, err := h.Start(exec.Command("sleep", "60"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Fatal("Release left a process running")
	}
	if err := h.Release(); err != nil {
		t.Fatalf("second Release: %v", err)
	}
	if _, err := l.AttachHost(ctx, "x", 11, nil); err == nil {
		t.Error("AttachHost accepted offset 11, which is node-1's")
	}
	if _, err := l.AttachHost(ctx, "node-1", 3, nil); err == nil {
		t.Error("AttachHost accepted a taken name")
	}
}
