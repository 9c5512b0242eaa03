//go:build linux

package memory

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"testing"

	"github.com/mooringlb/mooring/internal/agent/agenttest"
)

// Only the binary's read-only mappings with no private (written) page are
// released: never its data, never another file's, never a RELRO page the
// dynamic linker wrote.
func TestCleanExeMappings(t *testing.T) {
	smaps := `00400000-016c9000 r-xp 00000000 08:01 123 /usr/bin/mooring
Rss:               14848 kB
Anonymous:             0 kB
016c9000-02adc000 r--p 012c9000 08:01 123 /usr/bin/mooring
Rss:               16384 kB
Anonymous:             0 kB
02adc000-02add000 r--p 026dc000 08:01 123 /usr/bin/mooring
Rss:                   4 kB
Anonymous:             4 kB
02add000-02b75000 rw-p 026dd000 08:01 123 /usr/bin/mooring
Rss:                 600 kB
Anonymous:            60 kB
7f0000000000-7f0000020000 r-xp 00000000 08:01 456 /usr/lib/x86_64-linux-gnu/libc.so.6
Rss:                 900 kB
Anonymous:             0 kB
c000000000-c004000000 rw-p 00000000 00:00 0 
Rss:               30000 kB
Anonymous:         30000 kB
`
	path := filepath.Join(t.TempDir(), "smaps")
	if err := os.WriteFile(path, []byte(smaps), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := cleanExeMappings(path, "/usr/bin/mooring")
	if err != nil {
		t.Fatal(err)
	}
	want := [][2]uint64{{0x400000, 0x16c9000}, {0x16c9000, 0x2adc000}}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("released %x, want %x", got, want)
	}
}

// Releasing this test binary's own mappings keeps it working (the pages
// come back from the page cache) and does not grow its file-backed RSS.
func TestReleaseStartupMemoryKeepsTheProcessWorking(t *testing.T) {
	before := rssFile(t)
	n, err := releaseStartupMemory()
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no mapping of this binary released")
	}
	// Code and data from all over the binary, run again.
	b, err := json.Marshal(map[string]any{"a": []int{1, 2}, "re": regexp.MustCompile(`^x+$`).MatchString("xx")})
	if err != nil || string(b) != `{"a":[1,2],"re":true}` {
		t.Fatalf("after the release: %s, %v", b, err)
	}
	if after := rssFile(t); after > before {
		t.Errorf("RssFile grew from %d to %d kB", before, after)
	}
	t.Logf("released %d MiB of mappings; RssFile %d -> %d kB", n>>20, before, rssFile(t))
}

func rssFile(t *testing.T) int {
	t.Helper()
	m, err := agenttest.ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return int(m.File >> 10)
}
