//go:build linux

package memory

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// releaseStartupMemory returns what start-up left behind: the heap the
// initial lists and the first decision freed (debug.FreeOSMemory), and the
// mappings of the binary's code and read-only data that only package
// initialisation touched. The latter are clean pages of a private file
// mapping: MADV_DONTNEED unmaps them from this process only (they stay in
// the page cache, and a page used again is mapped again on its first
// access), so RSS then counts the code the agent really runs. The same
// ranges are then advised MADV_RANDOM: a page faulted in again is read
// alone, without the readahead window around it that the fault would map
// too (the kernel maps the cached pages around a fault, up to a whole
// large folio), so the binary's pages in RSS stay near the code in use.
// It returns the bytes of mappings released.
func releaseStartupMemory() (uint64, error) {
	debug.FreeOSMemory()
	exe, err := os.Executable()
	if err != nil {
		return 0, err
	}
	exe, err = filepath.EvalSymlinks(exe)
	if err != nil {
		return 0, err
	}
	ranges, err := cleanExeMappings("/proc/self/smaps", exe)
	if err != nil {
		return 0, err
	}
	var released uint64
	for _, r := range ranges {
		// The raw call: the range is no Go memory, so no []byte for it.
		for _, advice := range []uintptr{unix.MADV_DONTNEED, unix.MADV_RANDOM} {
			if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(r[0]), uintptr(r[1]-r[0]), advice); errno != 0 {
				return released, fmt.Errorf("madvise(%d) %x-%x: %w", advice, r[0], r[1], errno)
			}
		}
		released += r[1] - r[0]
	}
	return released, evictUnmapped(exe)
}

// evictUnmapped asks the kernel to drop path's clean pages from the page
// cache that no process maps (POSIX_FADV_DONTNEED leaves mapped and dirty
// pages alone). Why: since Linux 6.18 a fault maps the whole large folio
// around the page touched (up to 2 MiB), and a binary the page cache holds
// in large folios — as a file just written by the Go linker is — came
// back at ~28 MiB of RssFile after the release where the same binary read
// from disk came back at ~7 (docs/benchmarks.md, "The binary's pages").
// The pages used again are read back in readahead's sizes.
func evictUnmapped(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		return fmt.Errorf("fadvise %s: %w", path, err)
	}
	return nil
}

// cleanExeMappings returns the read-only mappings of exe (r-xp, r--p) in
// an smaps file that hold no anonymous page: a page the dynamic linker
// wrote (relocations, RELRO) is a private copy that MADV_DONTNEED would
// throw away, so such a mapping is left alone.
func cleanExeMappings(smaps, exe string) ([][2]uint64, error) {
	f, err := os.Open(smaps)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var (
		out     [][2]uint64
		cur     [2]uint64
		want    bool
		flushed = true
	)
	flush := func() {
		if want && !flushed {
			out = append(out, cur)
		}
		flushed = true
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 0 {
			continue
		}
		if !strings.HasSuffix(fs[0], ":") {
			// A mapping's header: 00400000-016c9000 r-xp 00000000 08:01 123 /usr/bin/mooring
			flush()
			want, flushed = false, false
			lo, hi, ok := strings.Cut(fs[0], "-")
			if !ok || len(fs) < 6 || fs[5] != exe || (fs[1] != "r-xp" && fs[1] != "r--p") {
				continue
			}
			start, err1 := strconv.ParseUint(lo, 16, 64)
			end, err2 := strconv.ParseUint(hi, 16, 64)
			if err1 != nil || err2 != nil || end <= start {
				continue
			}
			cur, want = [2]uint64{start, end}, true
			continue
		}
		if fs[0] == "Anonymous:" && len(fs) > 1 && fs[1] != "0" {
			want = false
		}
	}
	flush()
	return out, sc.Err()
}
