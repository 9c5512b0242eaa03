package realnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/mooringlb/mooring/internal/netlab"
)

// TestSweepCgroups: a tree named for a dead PID and holding no process is
// removed from every hierarchy; one named for a live PID, and one holding
// a process although its PID is dead, stay. (Fails if the sweep skips the
// liveness check: the live tree goes; or the process check: the busy one
// goes, or rather its removal fails.)
func TestSweepCgroups(t *testing.T) {
	netlab.RequirePrivileges(t) // root: cgroups
	prefix := fmt.Sprintf("mooring-sweeptest-%d-", os.Getpid())
	dead := func() int {
		c := exec.Command("true")
		if err := c.Run(); err != nil {
			t.Fatal(err)
		}
		return c.Process.Pid
	}
	deadTop := fmt.Sprintf("/%s%d", prefix, dead())
	liveTop := fmt.Sprintf("/%s%d", prefix, os.Getpid())
	busyTop := fmt.Sprintf("/%s%d", prefix, dead())
	for _, top := range []string{deadTop, liveTop, busyTop} {
		if err := CreateCgroup(top + "/node-1"); err != nil {
			t.Fatal(err)
		}
	}
	// A process inside the busy tree (in the pids hierarchy).
	sleeper := exec.Command("sleep", "60")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	pidsDir := filepath.Join(CgroupMountRoot, "pids", busyTop, "node-1")
	if err := os.WriteFile(filepath.Join(pidsDir, "cgroup.procs"), []byte(fmt.Sprint(sleeper.Process.Pid)), 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = sleeper.Process.Kill()
		_ = sleeper.Wait()
		for _, top := range []string{deadTop, liveTop, busyTop} {
			_ = RemoveCgroup(top, "")
		}
	})
	removed, err := SweepCgroups(prefix)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(removed, []string{deadTop}) {
		t.Fatalf("removed %v, want only %s", removed, deadTop)
	}
	hs, err := hierarchies()
	if err != nil || len(hs) == 0 {
		t.Fatalf("hierarchies %v, %v", hs, err)
	}
	for _, h := range hs {
		if _, err := os.Stat(filepath.Join(h, deadTop)); !os.IsNotExist(err) {
			t.Errorf("%s%s still there: %v", h, deadTop, err)
		}
		for _, keep := range []string{liveTop, busyTop} {
			if _, err := os.Stat(filepath.Join(h, keep, "node-1")); err != nil {
				t.Errorf("%s%s/node-1 removed: %v", h, keep, err)
			}
		}
	}
}
