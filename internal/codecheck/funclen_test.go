package codecheck

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// maxFuncLines is STYLE.md's limit on a function, from its func keyword
// to its closing brace.
const maxFuncLines = 80

// longFuncs are the functions kept over maxFuncLines, each with why
// (issue 22 lists them). Remove an entry when its function is split: the
// test fails on an entry that no longer needs to be here.
var longFuncs = map[string]string{
	"internal/lab/cluster_linux.go bringUp":                 "the lab's bring-up sequence in order; to split by phase (lab owner)",
	"internal/lab/cluster_linux.go build":                   "one step short of the limit; to split with bringUp (lab owner)",
	"internal/lab/pki.go newPKI":                            "mostly the certificate table of the lab's components; to turn into a table (lab owner)",
	"internal/lab/kubelet/mooringpod_linux.go startMooring": "the Mooring pod's process start in order; to split (lab owner)",
	"internal/lab/kubelet/mooringpod_linux.go podMounts":    "a table of the pod's mounts; to turn into a literal (lab owner)",
	"internal/cli/lab/up.go newUpCommand":                   "mostly cobra flag declarations (a table in all but form)",
	"internal/lab/metallb_linux.go syncMetalLB":             "the MetalLB comparison's sync in order; to split (lab owner)",
	"internal/probe/newpod.go round":                        "one probe round's steps in order; to split (probe owner)",
}

// TestFunctionsAtMost80Lines fails when a non-test, non-generated function
// under internal/ is longer than maxFuncLines and not listed in longFuncs.
func TestFunctionsAtMost80Lines(t *testing.T) {
	root := repoRoot(t)
	fset := token.NewFileSet()
	seen := map[string]bool{}
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") ||
			strings.HasPrefix(d.Name(), "zz_generated") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return fmt.Errorf("parsing %s: %w", path, err)
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Body == nil {
				continue
			}
			n := fset.Position(fd.End()).Line - fset.Position(fd.Pos()).Line + 1
			key := rel + " " + fd.Name.Name
			if n <= maxFuncLines {
				continue
			}
			seen[key] = true
			if _, ok := longFuncs[key]; !ok {
				t.Errorf("%s: %s is %d lines, over the %d of STYLE.md: split it into named steps (or, for a table literal, list it in longFuncs with why)",
					rel, fd.Name.Name, n, maxFuncLines)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for key := range longFuncs {
		if !seen[key] {
			t.Errorf("longFuncs lists %s, which is no longer over %d lines (or is gone): remove the entry", key, maxFuncLines)
		}
	}
}
