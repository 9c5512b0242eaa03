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
