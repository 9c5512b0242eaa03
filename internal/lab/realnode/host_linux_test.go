package realnode

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// privateHost is a Host whose record and sysctl tree live in a fresh
// folder, with the host's own values set to ones a kubelet would change:
// the record's rules run without waiting for the labs that hold the real
// host (go test runs internal/lab beside this package; its real nodes hold
// HostFile for most of its ten minutes). The real /proc/sys and HostFile
// are exercised by every real-node lab test (compareHost in internal/lab).
func privateHost(t *testing.T, dir, id string, pid int) Host {
	t.Helper()
	return Host{ID: id, PID: pid, recordFile: filepath.Join(dir, "host.json"), sysctlDir: filepath.Join(dir, "sys")}
}

// hostOwn writes the host's own values into dir's sysctl tree: each one
// differs from KernelDefaults, so Acquire must change and record them all.
func hostOwn(t *testing.T, dir string) map[string]string {
	t.Helper()
	own := map[string]string{}
	for k, v := range KernelDefaults {
		own[k] = v + "7"
		f := sysctlTree(filepath.Join(dir, "sys")).file(k)
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(f, []byte(own[k]+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return own
}

func readTree(t *testing.T, h Host) map[string]string {
	t.Helper()
	out := map[string]string{}
	for k := range KernelDefaults {
		v, err := h.sysctls().read(k)
		if err != nil {
			t.Fatal(err)
		}
		out[k] = v
	}
	return out
}

// TestHostSetsAndRestores: Acquire sets the kernel values a kubelet
// insists on and creates missing mount points; the last Release puts the
// values back and removes exactly the folders it created. (Fails if
// restoreHost is skipped: the sysctls stay at the kubelet's values.)
func TestHostSetsAndRestores(t *testing.T) {
	dir := t.TempDir()
	before := hostOwn(t, dir)
	base := filepath.Join(dir, "mnt")
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	mp := filepath.Join(base, "a", "b")
	h := privateHost(t, dir, "test", os.Getpid())
	if err := h.Acquire([]string{mp, base}); err != nil {
		t.Fatal(err)
	}
	during := readTree(t, h)
	if !maps.Equal(during, KernelDefaults) {
		t.Errorf("while held: %v, want %v", during, KernelDefaults)
	}
	if st, err := os.Stat(mp); err != nil || !st.IsDir() {
		t.Errorf("mount point %s not created: %v", mp, err)
	}
	// A second holder keeps everything when the first leaves.
	h2 := privateHost(t, dir, "test2", os.Getpid())
	if err := h2.Acquire(nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Release(); err != nil {
		t.Fatal(err)
	}
	if v := readTree(t, h); !maps.Equal(v, KernelDefaults) {
		t.Errorf("restored while another lab still holds them: %v", v)
	}
	if err := h2.Release(); err != nil {
		t.Fatal(err)
	}
	if after := readTree(t, h); !maps.Equal(before, after) {
		t.Errorf("after the last release: %v, want the host's own %v", after, before)
	}
	if _, err := os.Stat(filepath.Join(base, "a")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("created folder %s/a left behind: %v", base, err)
	}
	if _, err := os.Stat(base); err != nil {
		t.Errorf("existing folder %s removed: %v", base, err)
	}
	if _, err := os.Stat(h.record()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", h.record(), err)
	}
}

// TestHostDropsDeadHolders: a lab that died without releasing does not
// keep the host's values from being restored.
func TestHostDropsDeadHolders(t *testing.T) {
	dir := t.TempDir()
	before := hostOwn(t, dir)
	dead := privateHost(t, dir, "dead", 1<<22) // beyond pid_max's default
	if err := dead.Acquire(nil); err != nil {
		t.Fatal(err)
	}
	live := privateHost(t, dir, "live", os.Getpid())
	if err := live.Acquire(nil); err != nil {
		t.Fatal(err)
	}
	if err := live.Release(); err != nil {
		t.Fatal(err)
	}
	if after := readTree(t, live); !maps.Equal(before, after) {
		t.Errorf("a dead holder kept the kubelet's values: %v, want %v", after, before)
	}
}
