// Package cniinstall puts a CNI plugin binary into the node's plugin folder
// (/opt/cni/bin) for the agent's init container. The copy is atomic: the
// binary is written to a temporary name in the destination folder, synced,
// then renamed over the old one, so a container runtime exec'ing the plugin
// at that moment runs either the old file or the new one, never a
// half-written one (which would fail every pod start on the node with
// "text file busy" or a truncated ELF).
//
// It imports nothing from k8s.io.
package cniinstall

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// tempPrefix names the in-flight copy; a dot keeps runtimes from listing it
// as a plugin and a crashed copy is easy to spot.
const tempPrefix = ".mooring-install-"

// Install copies the file from into the folder dir under its own base name
// and returns the installed path. Cost: one read and one write of the file.
func Install(from, dir string) (string, error) {
	src, err := os.Open(from)
	if err != nil {
		return "", fmt.Errorf("install-cni: %w (the image ships the plugin; is --from right?)", err)
	}
	defer src.Close()
	st, err := src.Stat()
	if err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("install-cni: %s is not a regular file", from)
	}
	return writeAtomic(dir, filepath.Base(from), src, 0o755)
}

// writeAtomic writes r to dir/name through a temporary file in dir, synced
// and renamed over the old file, and returns the path.
func writeAtomic(dir, name string, r io.Reader, mode os.FileMode) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("install-cni: folder: %w (is the hostPath mounted?)", err)
	}
	dst := filepath.Join(dir, name)
	tmp, err := os.CreateTemp(dir, tempPrefix+name+"-")
	if err != nil {
		return "", fmt.Errorf("install-cni: %w (is the hostPath mounted writable?)", err)
	}
	ok := false
	defer func() {
		if !ok {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err := io.Copy(tmp, r); err != nil {
		return "", fmt.Errorf("install-cni: copy to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(mode); err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return "", fmt.Errorf("install-cni: %w", err)
	}
	ok = true
	// The rename is durable once the folder is synced; a failure here
	// leaves the new file in place, so it is not worth failing the pod.
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return dst, nil
}
