package cniinstall

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

func write(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// noTemps fails when a temporary copy is left in dir.
func noTemps(t *testing.T, dir string) {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tempPrefix) {
			t.Errorf("temporary copy %s left behind", e.Name())
		}
	}
}

// A fresh node: the folder is created, the plugin is executable, nothing
// else is left in the folder.
func TestInstallFresh(t *testing.T) {
	src := filepath.Join(t.TempDir(), "mooring-ipam")
	write(t, src, []byte("plugin v1"))
	dir := filepath.Join(t.TempDir(), "opt", "cni", "bin")
	dst, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	if dst != filepath.Join(dir, "mooring-ipam") {
		t.Errorf("installed at %s", dst)
	}
	st, err := os.Stat(dst)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o755 {
		t.Errorf("mode %v, want 0755", st.Mode().Perm())
	}
	if b, _ := os.ReadFile(dst); string(b) != "plugin v1" {
		t.Errorf("content %q", b)
	}
	noTemps(t, dir)
}

// An upgrade replaces the file by rename, not in place: a runtime that has
// the old plugin open (or is exec'ing it) keeps reading the whole old file,
// and the path holds the whole new one.
func TestInstallReplacesAtomically(t *testing.T) {
	srcDir, dir := t.TempDir(), t.TempDir()
	src := filepath.Join(srcDir, "mooring-ipam")
	old := bytes.Repeat([]byte("o"), 64<<10)
	write(t, filepath.Join(dir, "mooring-ipam"), old)
	held, err := os.Open(filepath.Join(dir, "mooring-ipam"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	var before syscall.Stat_t
	if err := syscall.Fstat(int(held.Fd()), &before); err != nil {
		t.Fatal(err)
	}
	write(t, src, []byte("new"))
	dst, err := Install(src, dir)
	if err != nil {
		t.Fatal(err)
	}
	var after syscall.Stat_t
	if err := syscall.Stat(dst, &after); err != nil {
		t.Fatal(err)
	}
	if after.Ino == before.Ino {
		t.Error("the plugin was rewritten in place (same inode): a runtime exec'ing it could see a half-written file")
	}
	got, err := os.ReadFile(held.Name())
	if err != nil || string(got) != "new" {
		t.Errorf("path holds %q (%v), want the new plugin", got, err)
	}
	rest := make([]byte, len(old)+1)
	n, _ := held.ReadAt(rest, 0)
	if !bytes.Equal(rest[:n], old) {
		t.Errorf("the open old file changed under its reader (%d bytes)", n)
	}
	noTemps(t, dir)
}

// Readers racing repeated upgrades only ever see one whole version.
func TestInstallReadersSeeWholeFiles(t *testing.T) {
	srcDir, dir := t.TempDir(), t.TempDir()
	const size = 256 << 10
	versions := [][]byte{bytes.Repeat([]byte("a"), size), bytes.Repeat([]byte("b"), size)}
	src := filepath.Join(srcDir, "mooring-ipam")
	write(t, src, versions[0])
	if _, err := Install(src, dir); err != nil {
		t.Fatal(err)
	}
	dst := filepath.Join(dir, "mooring-ipam")
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var bad []string
	var mu sync.Mutex
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			b, err := os.ReadFile(dst)
			if err != nil || !(bytes.Equal(b, versions[0]) || bytes.Equal(b, versions[1])) {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("read %d bytes, %v", len(b), err))
				mu.Unlock()
			}
		}
	}()
	for i := range 50 {
		write(t, src, versions[i%2])
		if _, err := Install(src, dir); err != nil {
			t.Error(err)
			break
		}
	}
	close(stop)
	wg.Wait()
	if len(bad) > 0 {
		t.Errorf("%d reads saw a missing or partial plugin, first: %s", len(bad), bad[0])
	}
	noTemps(t, dir)
}

// A missing source fails, names the fix, and leaves the installed plugin
// and the folder as they were.
func TestInstallMissingSource(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "mooring-ipam"), []byte("installed"))
	_, err := Install(filepath.Join(t.TempDir(), "mooring-ipam"), dir)
	if err == nil || !strings.Contains(err.Error(), "--from") {
		t.Fatalf("missing source: %v, want an error naming --from", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "mooring-ipam")); string(b) != "installed" {
		t.Errorf("the installed plugin changed to %q", b)
	}
	if _, err := Install(t.TempDir(), dir); err == nil {
		t.Error("a folder as the source was accepted")
	}
	noTemps(t, dir)
}
