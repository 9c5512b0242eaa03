//go:build linux

package netlab

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

const privChildEnv = "MOORING_NETLAB_PRIVILEGES_CHILD"

// TestRequirePrivilegesChild is run by TestRequirePrivilegesFailsUnderCI in
// a child process without capabilities; alone it does nothing.
func TestRequirePrivilegesChild(t *testing.T) {
	if os.Getenv(privChildEnv) != "1" {
		t.Skip("run by TestRequirePrivilegesFailsUnderCI")
	}
	RequirePrivileges(t)
	t.Log("PRIVILEGED")
}

// The suite must be able to fail: without privileges a privileged test
// skips locally but fails under CI=true.
func TestRequirePrivilegesFailsUnderCI(t *testing.T) {
	RequirePrivileges(t)
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("no setpriv (util-linux) to drop capabilities: %v", err)
	}
	run := func(ci string) (string, error) {
		cmd := exec.Command(setpriv, "--inh-caps=-all", "--ambient-caps=-all", "--bounding-set=-all", "--",
			os.Args[0], "-test.run=^TestRequirePrivilegesChild$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), privChildEnv+"=1", "CI="+ci)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("true")
	if err == nil || !strings.Contains(out, "CI=true but this test lacks privileges") {
		t.Errorf("CI=true without capabilities: err %v, output:\n%s", err, out)
	}
	out, err = run("")
	if err != nil || !strings.Contains(out, "SKIP") || strings.Contains(out, "PRIVILEGED") {
		t.Errorf("locally without capabilities: err %v, output:\n%s", err, out)
	}
}
