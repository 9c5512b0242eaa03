package codecheck

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// pureMarker is the directive a pure core's package doc carries.
const pureMarker = "//mooring:pure"

// firstPure are the pure cores that must keep the marker.
var firstPure = []string{"internal/ipalloc", "internal/lbipam", "internal/announce", "internal/podipam"}

// forbidden are the import path prefixes no pure core may reach.
var forbidden = []string{"k8s.io/", "sigs.k8s.io/", "github.com/vishvananda/netlink"}

// TestPureCoresImportNoKubernetes fails when a pure core imports, directly
// or through another package, anything from Kubernetes or netlink.
func TestPureCoresImportNoKubernetes(t *testing.T) {
	root := repoRoot(t)
	pure, err := pureDirs(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range firstPure {
		if !slices.Contains(pure, dir) {
			t.Errorf("%s lost the %s directive in its package doc: put it back (it is a pure core)", dir, pureMarker)
		}
	}
	if len(pure) == 0 {
		t.Fatal("no pure core found: the marker search is broken")
	}
	for _, dir := range pure {
		deps, err := goListDeps(root, "./"+dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		for _, d := range deps {
			if bad := forbiddenPrefix(d); bad != "" {
				t.Errorf("%s is a pure core (%s) but imports %s (via its imports or directly): "+
					"move that code into an adapter package, or convert the input before it reaches the core", dir, pureMarker, d)
			}
		}
	}
}

func forbiddenPrefix(path string) string {
	for _, p := range forbidden {
		if strings.HasPrefix(path, p) {
			return p
		}
	}
	return ""
}

// goListDeps lists the non-test packages pkg imports, transitively.
func goListDeps(root, pkg string) ([]string, error) {
	cmd := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", pkg)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list -deps %s: %w\n%s", pkg, err, stderr.Bytes())
	}
	return strings.Fields(string(out)), nil
}

// repoRoot is the module root (two levels up from this package).
func repoRoot(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(wd))
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod two levels above %s", wd)
	}
	return root
}
