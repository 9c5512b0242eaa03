//go:build linux

package memory

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

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
	// Every released mapping is advised random reads (smaps' VmFlags "rr"):
	// a page faulted in again comes alone, not with a readahead window.
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		t.Fatal(err)
	}
	flags := exeVmFlags(t, exe)
	if len(flags) == 0 {
		t.Fatal("no read-only mapping of this binary in smaps")
	}
	for m, f := range flags {
		if !slices.Contains(f, "rr") {
			t.Errorf("mapping %s: VmFlags %v, want rr (MADV_RANDOM)", m, f)
		}
	}
}

// exeVmFlags maps each clean read-only mapping of exe in this process's
// smaps (what releaseStartupMemory releases) to its VmFlags.
func exeVmFlags(t *testing.T, exe string) map[string][]string {
	t.Helper()
	ranges, err := cleanExeMappings("/proc/self/smaps", exe)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, r := range ranges {
		want[fmt.Sprintf("%08x-%08x", r[0], r[1])] = true // as smaps prints them
	}
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	out, cur := map[string][]string{}, ""
	for _, line := range strings.Split(string(b), "\n") {
		fs := strings.Fields(line)
		switch {
		case len(fs) == 0:
		case !strings.HasSuffix(fs[0], ":"):
			cur = ""
			if want[fs[0]] {
				cur = fs[0]
			}
		case fs[0] == "VmFlags:" && cur != "":
			out[cur] = fs[1:]
		}
	}
	return out
}

func rssFile(t *testing.T) int {
	t.Helper()
	m, err := agenttest.ReadProc(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	return int(m.File >> 10)
}

// evictUnmapped drops a file's clean, unmapped pages from the page cache
// (what mincore reports resident through a mapping nobody touched).
func TestEvictUnmappedDropsCleanPages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blob")
	const size = 8 << 20
	if err := os.WriteFile(path, make([]byte, size), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := unix.Fsync(int(f.Fd())); err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(io.Discard, f); err != nil { // read it all in
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	resident := func() int {
		vec := make([]byte, size/os.Getpagesize())
		if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
			t.Fatal(errno)
		}
		n := 0
		for _, v := range vec {
			n += int(v & 1)
		}
		return n
	}
	before := resident()
	if before == 0 {
		t.Fatal("nothing of a file just read is in the page cache: nothing to evict, the test proves nothing")
	}
	if err := evictUnmapped(path); err != nil {
		t.Fatal(err)
	}
	if after := resident(); after > before/10 {
		t.Fatalf("%d of %d pages still cached after the eviction", after, before)
	}
}
