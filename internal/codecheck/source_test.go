package codecheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// packageDirs are the directories under internal/ that hold Go code,
// relative to root.
func packageDirs(root string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(filepath.Join(root, "internal"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		if !slices.Contains(out, rel) {
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// pureDirs are the package directories whose package doc carries
// pureMarker.
func pureDirs(root string) ([]string, error) {
	dirs, err := packageDirs(root)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, dir := range dirs {
		ok, err := declaresPure(filepath.Join(root, dir))
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, dir)
		}
	}
	return out, nil
}

// declaresPure reports whether a non-test file of dir has pureMarker in
// its package doc comment.
func declaresPure(dir string) (bool, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return false, err
	}
	fset := token.NewFileSet()
	for _, e := range ents {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, e.Name()), nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return false, err
		}
		if hasMarker(f.Doc) {
			return true, nil
		}
	}
	return false, nil
}

func hasMarker(doc *ast.CommentGroup) bool {
	if doc == nil {
		return false
	}
	for _, c := range doc.List {
		if strings.TrimSpace(c.Text) == pureMarker {
			return true
		}
	}
	return false
}
