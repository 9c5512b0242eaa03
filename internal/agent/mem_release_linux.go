//go:build linux

package agent

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
// access), so RSS then counts the code the agent really runs. It returns
// the bytes of mappings released.
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
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var released uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 00400000-016c9000 r-xp 00000000 08:01 123 /usr/bin/mooring
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[5] != exe || (fs[1] != "r-xp" && fs[1] != "r--p") {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		// The raw call: the range is no Go memory, so no []byte for it.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("madvise %s: %w", fs[0], errno)
		}
		released += end - start
	}
	return released, sc.Err()
}
