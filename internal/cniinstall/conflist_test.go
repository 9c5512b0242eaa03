package cniinstall

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/libcni"
)

// The network install-cni writes is one libcni (what containerd and CRI-O
// use) loads: the main plugin with mooring-ipam as its IPAM, then
// mooring-ipam as a list entry, both on the given socket.
func TestConfListLoads(t *testing.T) {
	for _, network := range []string{NetworkPTP, NetworkBridge} {
		b, err := ConfList(network, "/run/mooring/ipamd.sock")
		if err != nil {
			t.Fatal(err)
		}
		list, err := libcni.ConfListFromBytes(b)
		if err != nil {
			t.Fatalf("%s: %v\n%s", network, err, b)
		}
		if list.Name != NetworkName || len(list.Plugins) != 2 || list.Plugins[0].Network.Type != network ||
			list.Plugins[0].Network.IPAM.Type != "mooring-ipam" || list.Plugins[1].Network.Type != "mooring-ipam" {
			t.Errorf("%s: %s", network, b)
		}
		if strings.Count(string(b), `"socket": "/run/mooring/ipamd.sock"`) != 2 {
			t.Errorf("%s: socket not in both entries:\n%s", network, b)
		}
	}
}

func TestConfListRefusesWithTheFix(t *testing.T) {
	for _, c := range []struct{ network, socket, want string }{
		{"flannel", "/run/mooring/ipamd.sock", "ptp or bridge"},
		{"", "/run/mooring/ipamd.sock", "write the network yourself"},
		{NetworkPTP, "ipamd.sock", "absolute path"},
	} {
		if _, err := ConfList(c.network, c.socket); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q %q: %v, want an error naming %q", c.network, c.socket, err, c.want)
		}
	}
}

// WriteConfList replaces the file whole and leaves no temporary file.
func TestWriteConfList(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, ConfListName), []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := WriteConfList(dir, NetworkPTP, "/run/x.sock")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	st, _ := os.Stat(p)
	if _, err := libcni.ConfListFromBytes(b); err != nil || st.Mode().Perm() != 0o644 {
		t.Errorf("%s: %v, mode %v:\n%s", p, err, st.Mode(), b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("folder holds %v, want the conflist only", ents)
	}
	if _, err := WriteConfList(filepath.Join(dir, ConfListName, "sub"), NetworkPTP, "/run/x.sock"); err == nil {
		t.Error("wrote into a folder below a file")
	}
}
