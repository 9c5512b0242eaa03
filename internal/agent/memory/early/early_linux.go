//go:build linux

// Package early lowers the agent's start-up peak of resident memory
// before the other packages initialise, when the process is the agent
// (argv[1] "agent"). Package initialisation touches pages all over the
// binary, and since Linux 6.18 a fault maps the whole large folio of the
// page cache around the page touched (up to 2 MiB), and a binary just
// written (by the linker, by an image pull) sits in the cache in large
// folios: the agent started with ~50 MiB of the binary resident, its peak
// (VmHWM) until the start-up release returned it. So, first, the
// binary's cached pages no process maps are dropped (POSIX_FADV_DONTNEED;
// other processes' mapped pages stay), and its read-only mappings are
// advised MADV_RANDOM: what initialisation touches is read back in small
// pieces and mapped alone. Cost: the agent's start reads those pages from
// disk (~0.1 s more for `mooring agent --help`). Figures: docs/benchmarks.md,
// "The agent's start-up peak".
//
// It imports syscall and unsafe only: Go initialises a package once its
// imports are, choosing among the ready ones by import path, so this one
// runs before the heavy initialisers (GODEBUG=inittrace=1 shows it 17th of
// ~400, at ~3 ms). Imported for its side effect by cmd/mooring.
package early

import (
	"syscall"
	"unsafe"
)

func init() { adviseRandom() }

// adviseRandom evicts and advises the executable when argv[1] is
// "agent". Every failure leaves the defaults.
func adviseRandom() {
	var cmd [256]byte
	n := readFile("/proc/self/cmdline", cmd[:])
	if !isAgent(cmd[:n]) {
		return
	}
	adviseExe()
}

// adviseExe advises this process's executable mappings MADV_RANDOM,
// drops the executable's unmapped pages from the page cache, and returns
// how many mappings it advised.
func adviseExe() int {
	var exe [4096]byte
	m, err := syscall.Readlink("/proc/self/exe", exe[:])
	if err != nil || m <= 0 {
		return 0
	}
	var maps [64 << 10]byte
	k := readFile("/proc/self/maps", maps[:])
	done := 0
	for _, r := range exeRanges(maps[:k], exe[:m]) {
		if _, _, errno := syscall.Syscall(syscall.SYS_MADVISE, r[0], r[1]-r[0], syscall.MADV_RANDOM); errno == 0 {
			done++
		}
	}
	if fd, err := syscall.Open(string(exe[:m]), syscall.O_RDONLY|syscall.O_CLOEXEC, 0); err == nil {
		_, _, _ = syscall.Syscall6(syscall.SYS_FADVISE64, uintptr(fd), 0, 0, 4, 0, 0) // POSIX_FADV_DONTNEED
		syscall.Close(fd)
	}
	return done
}

// readFile reads up to len(buf) bytes of path.
func readFile(path string, buf []byte) int {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0
	}
	defer syscall.Close(fd)
	n := 0
	for n < len(buf) {
		k, err := syscall.Read(fd, buf[n:])
		if err != nil || k <= 0 {
			break
		}
		n += k
	}
	return n
}

// isAgent reports whether a NUL-separated command line's second word is
// "agent".
func isAgent(cmdline []byte) bool {
	i := 0
	for i < len(cmdline) && cmdline[i] != 0 {
		i++
	}
	rest := cmdline[min(i+1, len(cmdline)):]
	return len(rest) >= 6 && string(rest[:5]) == "agent" && rest[5] == 0
}

// exeRanges returns the r-xp and r--p mappings of exe in a maps file:
// "00400000-016c9000 r-xp 00000000 08:01 123   /usr/bin/mooring".
func exeRanges(maps, exe []byte) [][2]uintptr {
	var out [][2]uintptr
	for len(maps) > 0 {
		line := maps
		if i := indexByte(maps, '\n'); i >= 0 {
			line, maps = maps[:i], maps[i+1:]
		} else {
			maps = nil
		}
		f := fields(line)
		if len(f) < 6 || string(f[5]) != string(exe) || (string(f[1]) != "r-xp" && string(f[1]) != "r--p") {
			continue
		}
		dash := indexByte(f[0], '-')
		if dash < 0 {
			continue
		}
		lo, ok1 := hex(f[0][:dash])
		hi, ok2 := hex(f[0][dash+1:])
		if ok1 && ok2 && hi > lo {
			out = append(out, [2]uintptr{lo, hi})
		}
	}
	return out
}

func indexByte(b []byte, c byte) int {
	for i, x := range b {
		if x == c {
			return i
		}
	}
	return -1
}

// fields splits on spaces; the sixth field runs to the end of the line
// (a path may hold spaces).
func fields(line []byte) [][]byte {
	var out [][]byte
	for len(line) > 0 && len(out) < 6 {
		for len(line) > 0 && line[0] == ' ' {
			line = line[1:]
		}
		if len(line) == 0 {
			break
		}
		if len(out) == 5 {
			out = append(out, line)
			break
		}
		i := indexByte(line, ' ')
		if i < 0 {
			i = len(line)
		}
		out = append(out, line[:i])
		line = line[i:]
	}
	return out
}

func hex(b []byte) (uintptr, bool) {
	var v uintptr
	if len(b) == 0 || len(b) > int(2*unsafe.Sizeof(v)) {
		return 0, false
	}
	for _, c := range b {
		switch {
		case c >= '0' && c <= '9':
			v = v<<4 | uintptr(c-'0')
		case c >= 'a' && c <= 'f':
			v = v<<4 | uintptr(c-'a'+10)
		default:
			return 0, false
		}
	}
	return v, true
}
