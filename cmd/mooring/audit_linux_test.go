package main

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mooringlb/mooring/internal/lab"
	"github.com/mooringlb/mooring/internal/netlab"
)

// TestAuditBinaryNamesSplit runs the built binary in a client namespace
// where two nodes answer ARP for one address (stale copies on lo): it
// exits 1, names both nodes next to their MACs (from a lab state file in
// the format `lab up` writes) and says where to look.
func TestAuditBinaryNamesSplit(t *testing.T) {
	l := netlab.NewForTest(t, netlab.Config{Nodes: 2})
	vip := netip.MustParseAddr("10.213.0.150")
	st := lab.State{PID: os.Getpid()}
	for _, n := range l.Nodes() {
		if err := n.AddAddr("lo", netip.PrefixFrom(vip, 32)); err != nil {
			t.Fatal(err)
		}
		st.Hosts = append(st.Hosts, lab.HostState{Name: n.Name, Role: "node", MAC: n.MAC.String()})
	}
	dir := t.TempDir()
	b, err := json.Marshal(st)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "mooring"), "audit", "arp", "-i", "eth0", "--wait", "500ms", vip.String())
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), lab.EnvStateDir + "=" + dir}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	p, err := l.Client().Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	err = p.Wait()
	if code := exitCode(err); code != 1 {
		t.Errorf("exit %d (%v), want 1 for a split", code, err)
	}
	out := stdout.String()
	for _, n := range l.Nodes() {
		if want := n.MAC.String() + " (" + n.Name + ")"; !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(out, "SPLIT: 2 responders; on node-1 and node-2, look") {
		t.Errorf("verdict:\n%s", out)
	}
	if stderr.Len() > 0 {
		t.Errorf("stderr (no kubeconfig must be quiet):\n%s", stderr.String())
	}
}
