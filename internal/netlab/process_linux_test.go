package netlab

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func sleepCmd(t testing.TB) *exec.Cmd {
	t.Helper()
	path, err := exec.LookPath("sleep")
	if err != nil {
		t.Skipf("no sleep binary: %v", err)
	}
	return exec.Command(path, "60")
}

// alive reports whether pid exists and is not a zombie (a SIGKILLed
// grandchild may wait as a zombie for a PID 1 that does not reap).
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

func TestStartRunsInNamespaceAndKill(t *testing.T) {
	l := NewForTest(t, Config{Nodes: 2})
	n := l.Nodes()[1]
	p, err := n.Start(sleepCmd(t))
	if err != nil {
		t.Fatal(err)
	}
	got, err := nsInode(fmt.Sprintf("/proc/%d/ns/net", p.PID))
	if err != nil {
		t.Fatal(err)
	}
	if want := fdInode(t, int(n.NS())); got != want {
		t.Fatalf("child is in namespace %d, want %s's %d", got, n.Name, want)
	}
	self, err := nsInode("/proc/self/ns/net")
	if err != nil || self == got {
		t.Fatalf("child shares the test process's namespace (%d, %v)", self, err)
	}
	// Pdeathsig is tied to the forking thread (Go issue 27505); forked from
	// a short-lived thread the child would be dead within a millisecond.
	// Keep the worker busy meanwhile, then require the child to be alive.
	for range 100 {
		if err := n.Do(func() error { return nil }); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case <-p.Done():
		t.Fatalf("child exited early: %v", p.Wait())
	case <-time.After(100 * time.Millisecond):
	}

	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("child not reaped 5 s after Kill")
	}
	var exit *exec.ExitError
	if err := p.Wait(); !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("Wait = %v, want killed by SIGKILL", err)
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
}

func TestCloseKillsProcessGroups(t *testing.T) {
	RequirePrivileges(t)
	l, err := New(testCtx(t), Config{Nodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// A shell with a grandchild in its process group, as an agent with
	// helpers would be.
	cmd := exec.Command("/bin/sh", "-c", "sleep 61 & echo $!; wait")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p, err := l.Nodes()[0].Start(cmd)
	if err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	grandchild, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := l.Client().Start(sleepCmd(t))
	if err != nil {
		t.Fatal(err)
	}
	if !alive(p.PID) || !alive(grandchild) || !alive(p2.PID) {
		t.Fatal("processes not running before Close")
	}
	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	t.Logf("Close with 2 process groups took %v", time.Since(start))
	for _, pid := range []int{p.PID, p2.PID} {
		if alive(pid) {
			t.Errorf("child %d still alive after Close", pid)
		}
	}
	// The grandchild is not ours to reap: poll until the kernel has it dead.
	for deadline := time.Now().Add(2 * time.Second); alive(grandchild); {
		if time.Now().After(deadline) {
			t.Fatalf("grandchild %d still alive after Close", grandchild)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
