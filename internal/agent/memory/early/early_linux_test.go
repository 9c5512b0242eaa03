//go:build linux

package early

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestIsAgent(t *testing.T) {
	for cmd, want := range map[string]bool{
		"mooring\x00agent\x00--node-name=n1\x00": true,
		"/usr/bin/mooring\x00agent\x00":          true,
		"mooring\x00agents\x00":                  false,
		"mooring\x00controller\x00":              false,
		"mooring\x00":                            false,
		"mooring\x00agent":                       false, // cut short: not a whole word
		"":                                       false,
	} {
		if got := isAgent([]byte(cmd)); got != want {
			t.Errorf("%q: %v, want %v", cmd, got, want)
		}
	}
}

func TestExeRanges(t *testing.T) {
	maps := "00400000-016c9000 r-xp 00000000 08:01 123                                /usr/bin/mooring\n" +
		"016c9000-03200000 r--p 012c9000 08:01 123                                /usr/bin/mooring\n" +
		"03200000-03300000 rw-p 02e00000 08:01 123                                /usr/bin/mooring\n" +
		"7f0000000000-7f0000001000 r-xp 00000000 08:01 9 /usr/bin/mooring (deleted)\n" +
		"7f0000002000-7f0000003000 r--p 00000000 08:01 10 /usr/lib/other.so\n" +
		"7ffd0000-7ffd1000 rw-p 00000000 00:00 0                                  [stack]\n" +
		"garbage line\n"
	got := exeRanges([]byte(maps), []byte("/usr/bin/mooring"))
	want := [][2]uintptr{{0x400000, 0x16c9000}, {0x16c9000, 0x3200000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %x, want %x", got, want)
	}
}

// TestAdviseExeMarksTheMappingsRandom: on this test binary's own
// mappings, every read-only mapping of the executable carries the kernel's
// random-read flag ("rr" in smaps' VmFlags) afterwards.
func TestAdviseExeMarksTheMappingsRandom(t *testing.T) {
	if n := adviseExe(); n == 0 {
		t.Fatal("no mapping of the executable advised")
	}
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		t.Fatal(err)
	}
	smaps, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	checked, inExe := 0, false
	for _, l := range strings.Split(string(smaps), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") {
			inExe = len(f) >= 6 && f[5] == exe && (f[1] == "r-xp" || f[1] == "r--p")
			continue
		}
		if inExe && f[0] == "VmFlags:" {
			checked++
			if !strings.Contains(l, " rr") {
				t.Errorf("an executable mapping lacks rr: %s", l)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no executable mapping found in smaps")
	}
}
