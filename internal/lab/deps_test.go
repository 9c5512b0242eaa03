package lab

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// The README names every Debian package `make deps` (part of `make demo`
// and `make test`) may install, so a user knows what the two commands put
// on the machine: a package added to hack/install-deps.sh without a word
// in the README fails here.
func TestReadmeNamesEveryDebianPackage(t *testing.T) {
	script, err := os.ReadFile("../../hack/install-deps.sh")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	lists := regexp.MustCompile(`(?m)pkgs\+?=\(([^)]*)\)`).FindAllStringSubmatch(string(script), -1)
	var pkgs []string
	for _, l := range lists {
		pkgs = append(pkgs, strings.Fields(l[1])...)
	}
	if len(pkgs) < 5 {
		t.Fatalf("found only %v in hack/install-deps.sh", pkgs)
	}
	for _, p := range pkgs {
		if !strings.Contains(string(readme), "`"+p+"`") {
			t.Errorf("README.md does not name the Debian package `%s` that make deps installs", p)
		}
	}
}

// Every table of docs/benchmarks.md says which configuration it ran with:
// its section has a **Settings:** line before it (the terms are defined
// at the top of the file).
func TestEveryBenchmarkTableNamesItsSettings(t *testing.T) {
	b, err := os.ReadFile("../../docs/benchmarks.md")
	if err != nil {
		t.Fatal(err)
	}
	section, settings, tables := "(top)", false, 0
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.HasPrefix(line, "## "):
			section, settings = line, false
		case strings.HasPrefix(line, "**Settings:**"):
			settings = true
		case strings.HasPrefix(line, "|---") || strings.HasPrefix(line, "| ---"):
			tables++
			if !settings && section != "## Settings the tables name" {
				t.Errorf("docs/benchmarks.md %q: a table without a **Settings:** line before it in its section", section)
			}
		}
	}
	if tables < 20 {
		t.Fatalf("found %d tables in docs/benchmarks.md", tables)
	}
}
