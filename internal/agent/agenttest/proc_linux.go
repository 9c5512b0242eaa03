//go:build linux

package agenttest

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// The one reader of /proc for the agent's benchmarks and tests: memory and
// CPU of a process, and the test's child processes by name.

// ProcMem is what /proc says about one process's memory and CPU.
type ProcMem struct {
	RSS, HWM, Anon, File uint64  // bytes
	CPU                  float64 // user + system seconds
}

func (m ProcMem) String() string {
	return fmt.Sprintf("VmRSS=%.1fMiB (anon %.1f, file %.1f) VmHWM=%.1fMiB cpu=%.1fs",
		MiB(m.RSS), MiB(m.Anon), MiB(m.File), MiB(m.HWM), m.CPU)
}

// MiB converts bytes.
func MiB(b uint64) float64 { return float64(b) / (1 << 20) }

// ReadProc reads VmRSS, VmHWM, RssAnon, RssFile from /proc/<pid>/status
// and utime+stime from /proc/<pid>/stat.
func ReadProc(pid int) (ProcMem, error) {
	var m ProcMem
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return m, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseUint(f[1], 10, 64)
		switch f[0] {
		case "VmRSS:":
			m.RSS = kb << 10
		case "VmHWM:":
			m.HWM = kb << 10
		case "RssAnon:":
			m.Anon = kb << 10
		case "RssFile:":
			m.File = kb << 10
		}
	}
	_, f, err := readStat(pid)
	if err != nil {
		return m, err
	}
	// utime and stime are fields 14 and 15, in clock ticks (100 a second).
	if len(f) > 12 {
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		m.CPU = (ut + st) / 100
	}
	return m, nil
}

// readStat returns the command of /proc/<pid>/stat and the fields after
// it (state first: field 3 of proc(5) is f[0]). The command may hold
// spaces and parentheses, so it ends at the last ')'.
func readStat(pid int) (string, []string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", nil, err
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open || end+2 > len(b) {
		return "", nil, fmt.Errorf("/proc/%d/stat: no command in %q", pid, b)
	}
	return string(b[open+1 : end]), strings.Fields(string(b[end+2:])), nil
}

// ChildPID returns the pid of this test process's child named comm (the
// API server and etcd testenv started), failing t if there is none.
func ChildPID(t testing.TB, comm string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	self := strconv.Itoa(os.Getpid())
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		c, f, err := readStat(pid)
		if err == nil && c == comm && len(f) > 1 && f[1] == self {
			return pid
		}
	}
	t.Fatalf("no child process %s of this test", comm)
	return 0
}
