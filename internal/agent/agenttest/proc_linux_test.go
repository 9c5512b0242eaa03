//go:build linux

package agenttest

import (
	"os"
	"strconv"
	"testing"
)

// The helpers read this test process as ps would.
func TestReadProcSelf(t *testing.T) {
	m, err := ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if m.RSS == 0 || m.HWM < m.RSS || m.Anon+m.File > m.RSS+(1<<20) {
		t.Fatalf("implausible memory: %v", m)
	}
	c, f, err := readStat(os.Getpid())
	if err != nil || c == "" || len(f) < 13 || f[1] != strconv.Itoa(os.Getppid()) {
		t.Fatalf("stat: command %q, fields %v, %v", c, f, err)
	}
}
